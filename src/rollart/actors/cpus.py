"""CPU pinning: run an actor process (or this coordinator) on given cores.

Disaggregation on one machine: the paper runs training and rollout on separate GPU clusters (RollArt
R4); a benchmark on one host gives each its own cores instead, so overlapping them buys what it buys on
separate hardware. ``ROLLART_CPUS="0"`` (or "0,2-3") in an actor's environment pins that actor process.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

ENV_VAR = "ROLLART_CPUS"


def parse_cpus(spec: str) -> set[int]:
    """``"0,2-3"`` -> {0, 2, 3}; a clear error for anything else."""
    cpus: set[int] = set()
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ValueError(f"{ENV_VAR}={spec!r}: expected core numbers like '0' or '0,2-3'") from None
    if not cpus:
        raise ValueError(f"{ENV_VAR}={spec!r} names no core")
    return cpus


def format_cpus(cpus) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def pin_process(cpus: set[int]) -> set[int]:
    """Pin every thread of this process to ``cpus`` (threads started later inherit it); returns the
    previous affinity of the calling thread so it can be restored. Cores this machine lacks are an error."""
    previous = os.sched_getaffinity(0)
    allowed = set(range(os.cpu_count() or 1))
    if not cpus <= allowed:
        raise ValueError(f"cannot pin to cores {format_cpus(cpus)}: this machine has cores {format_cpus(allowed)} "
                         f"(available to this process: {format_cpus(previous)})")
    try:
        os.sched_setaffinity(0, cpus)  # the calling thread first: the kernel refuses cores a cpuset denies us
    except OSError:
        raise ValueError(f"cannot pin to cores {format_cpus(cpus)}: the cores available to this process are "
                         f"{format_cpus(previous)}") from None
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):  # a thread that just exited
            pass
    return previous


@contextlib.contextmanager
def pinned(cpus) -> Iterator[None]:
    """Pin this process to ``cpus`` for the block (no-op when empty), then restore the previous affinity."""
    previous = pin_process(set(cpus)) if cpus else None
    try:
        yield
    finally:
        if previous is not None:
            pin_process(previous)


def pin_from_env() -> None:
    """Actor processes call this first thing: honour ``ROLLART_CPUS`` if set."""
    spec = os.environ.get(ENV_VAR, "")
    if spec:
        pin_process(parse_cpus(spec))
