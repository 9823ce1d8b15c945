"""Rewards: rule rewards (rules.py) and the serverless reward endpoint (serve.py, client.py)."""
