"""Inference serving below the LLMProxy: the command-driven worker loop around one engine (``worker``, which
can sleep for the simulated step time of rollart.hardware.SpeedModel) and the prefill/decode split of one
request (``pd``)."""
