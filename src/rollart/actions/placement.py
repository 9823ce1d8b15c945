"""Cores granted to the action running on this thread, and the pinning of the processes it starts.

The action scheduler grants an env step (or a test run) a core set; the env host runs the step on a thread
under :func:`on_cores`, and whatever that step starts as a child process (a sandbox command, a test run)
is pinned to those cores by :func:`pin_preexec` before it executes (``os.sched_setaffinity``).
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, Iterator, Optional, Sequence

_local = threading.local()


@contextlib.contextmanager
def on_cores(cores: Optional[Sequence[int]]) -> Iterator[None]:
    """Within this block, processes started from this thread run on ``cores`` (None or empty: unpinned)."""
    before = getattr(_local, "cores", None)
    _local.cores = tuple(int(c) for c in cores) if cores else None
    try:
        yield
    finally:
        _local.cores = before


def granted_cores() -> Optional[tuple[int, ...]]:
    """The cores granted to the action running on this thread, if any."""
    return getattr(_local, "cores", None)


def pin_preexec(cores: Optional[tuple[int, ...]] = None) -> Optional[Callable[[], None]]:
    """A preexec step that pins the child to ``cores`` (default: this thread's grant); None if unpinned."""
    cores = granted_cores() if cores is None else cores
    if not cores:
        return None
    wanted = set(cores)
    return lambda: os.sched_setaffinity(0, wanted)
