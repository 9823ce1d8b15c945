"""Inference serving below the LLMProxy: ``worker`` (InferenceWorker, the actor that serves one engine and
receives its weights), ``engine_loop`` (EngineLoop: the command loop that owns that engine) and ``pd`` (the
prefill/decode split of one request, ``generate_disaggregated``)."""
