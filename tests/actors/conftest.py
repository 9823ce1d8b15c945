"""Shared fixtures for the actor-runtime tests: a running ActorSystem per test."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # sample_actors importable here and in actor processes

from rollart.actors import ActorSystem  # noqa: E402


@pytest.fixture
async def system():
    async with ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=2.0) as s:
        yield s
