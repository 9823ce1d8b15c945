"""Inference workers: the command-driven loop around one engine (``worker``), the simulated
hardware speed model (``speed``), and prefill/decode disaggregation for LLMProxy (``pd``)."""
