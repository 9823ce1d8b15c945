"""Command-line tools: ``python -m rollart.tools.make_tiny_model OUT``, ``python -m rollart.tools.get_smollm2``."""
