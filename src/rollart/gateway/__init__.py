"""Agent gateway: an OpenAI-compatible HTTP server on the LLMProxy that records every call token-in/token-out,
so an existing agent (OpenAI client or CLI harness) trains as a trajectory (``AgentTask``)."""
