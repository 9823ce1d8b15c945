"""Static per-trajectory core slots: a baseline the action scheduler is measured against on generated suites
(``tools/bench/actions_real.py``, ``real_cpu``); a trajectory keeps fixed pinned cores for all of its commands.
Unlike the paper's baseline (ARL-Tangram §6.1: a Kubernetes pod per trajectory requesting 0.5 CPU, unpinned,
admitted only while the requests fit the node), slots are dealt without an admission limit."""
from __future__ import annotations

import asyncio
import os
import time

from rollart.actions.cpu import Pinner, expand


class StaticSlotRunner:
    """Real per-trajectory static allocation: a trajectory gets fixed cores at its first command and
    every command of it runs pinned there (no action scheduler), until :meth:`end_trajectory`.
    ``cores_per_slot`` cores per slot; slots are dealt round-robin, so slots may share cores when the
    batch exceeds the cores (like pods with a fractional CPU request)."""

    def __init__(self, cores: list[int], cores_per_slot: int = 1, use_cgroup=None):
        if cores_per_slot < 1 or cores_per_slot > len(cores):
            raise ValueError(f"cores_per_slot must be in 1..{len(cores)}, got {cores_per_slot}")
        self.slots = [tuple(cores[i:i + cores_per_slot]) for i in range(0, len(cores), cores_per_slot)]
        self.pinner = Pinner(use_cgroup)
        self.assigned: dict = {}
        self._next = 0

    def slot(self, trajectory) -> tuple[int, ...]:
        if trajectory not in self.assigned:
            self.assigned[trajectory] = self.slots[self._next % len(self.slots)]
            self._next += 1
        return self.assigned[trajectory]

    async def run(self, trajectory, argv: list[str], cwd: str) -> tuple[int, str, float]:
        """Run ``argv`` pinned to the trajectory's slot; returns (returncode, output, seconds)."""
        cores = self.slot(trajectory)
        name = f"static-{os.getpid()}-{time.monotonic_ns()}"
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *[expand(a, 1) for a in argv], cwd=cwd, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, preexec_fn=self.pinner.prepare(name, cores))
        out, _ = await proc.communicate()
        self.pinner.cleanup(name)
        return proc.returncode, out.decode(errors="replace"), time.monotonic() - t0

    def end_trajectory(self, trajectory) -> None:
        self.assigned.pop(trajectory, None)

    def close(self) -> None:
        self.pinner.close()
