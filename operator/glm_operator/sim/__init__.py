"""A vLLM stand-in for the fake pods: the OpenAI-compatible API, /health, /metrics, and the failures."""
