"""Inference workers: the command-driven loop around one engine (``worker``, which can sleep for the
simulated step time of rollart.hardware.SpeedModel), and prefill/decode disaggregation for LLMProxy (``pd``)."""
