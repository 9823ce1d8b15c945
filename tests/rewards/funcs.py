"""Reward-like functions used by the endpoint tests (slow, failing, unserialisable)."""
import time


def slow(seconds):
    time.sleep(seconds)
    return "done"


def boom():
    raise ValueError("boom")


def unserialisable():
    return {1, 2}
