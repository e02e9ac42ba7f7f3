"""A frontend worker process: HTTP, gRPC and OpenAI listeners over a data plane whose requests and
control calls go to the engine (see docs/architecture.md)."""
