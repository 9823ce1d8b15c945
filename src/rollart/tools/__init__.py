"""Getting a model to run with, offline: ``python -m rollart.tools.make_tiny_model OUT`` (a tiny random one for
tests and CPU runs), ``python -m rollart.tools.get_smollm2`` (SmolLM2-135M-Instruct), and ``format_warmup`` (teach
a fresh model the answer format of text envs before RL)."""
