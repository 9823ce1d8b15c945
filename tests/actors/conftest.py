"""Shared fixtures for the actor-runtime tests: a running ActorSystem per test."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # sample_actors importable here and in actor processes

from rollart.actors import ActorSystem  # noqa: E402


@pytest.fixture
async def system():
    # a generous heartbeat window: these tests are not about death detection, and on a loaded 2-core
    # machine a first `import torch` inside an actor can starve its heartbeat thread for seconds
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as s:
        yield s
