"""The OpenAI-compatible frontend (``--openai-port``): completions and chat completions over the data
plane, for the clients, SDKs and harnesses that speak OpenAI's API."""
