"""The fault suite: ``python -m rollart.faults`` runs a short real training run (the FrozenLake quickstart's
pipeline, tiny, on CPU) under each fault — env exceptions and hangs, kill -9 of actor processes, reward-endpoint
faults, a corrupt checkpoint, malformed wire frames, hostile sandbox commands — and prints one measured figure
per fault. Kept free of heavy imports: reward-endpoint workers import ``rollart.faults.rewards``."""
