"""Inference serving below the LLMProxy: the command-driven worker loop around one engine (``worker``),
the simulated hardware speed model (``speed``) and the prefill/decode split of one request (``pd``)."""
