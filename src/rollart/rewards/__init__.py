"""Scoring trajectories: rule rewards (rules.py, judge.py), and the serverless endpoint that runs stateless
reward functions on a process pool apart from training (serve.py, client.py, registry.py, worker.py)."""
