"""Reward functions the serverless-reward pipeline tests serve (imported by the endpoint's workers)."""


def valid_move(text, reference):
    """1.0 for a FrozenLake move letter, else 0.0 (the same signal as the env's invalid-action penalty)."""
    return 1.0 if text.strip() in ("L", "D", "R", "U") else 0.0
