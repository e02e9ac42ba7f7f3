"""What crosses between the engine and its frontend workers: typed messages, a framed channel that
batches its writes, and shared-memory arenas that carry the tensors (see docs/architecture.md)."""
