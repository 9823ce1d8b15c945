"""How independent this machine's cores are: a single-thread matmul loop timed alone on one core and again
while another core runs the same loop (1.0 = independent, as separate GPU clusters are).

Used by the async_training benchmark: on VMs whose vCPUs share a physical core, work overlapped on two
cores (training beside rollout) runs slower than either alone, a cost separate clusters do not pay.
"""
from __future__ import annotations

import os
import time


def _matmul_seconds(n: int = 800) -> float:
    import torch
    a = torch.randn(256, 256)
    t0 = time.perf_counter()
    for _ in range(n):
        a @ a
    return time.perf_counter() - t0


def _busy(core: int, seconds: float) -> None:
    import torch
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    a, end = torch.randn(256, 256), time.time() + seconds
    while time.time() < end:
        a @ a


def cross_core_slowdown(trainer_cpus: tuple[int, ...], rollout_cpus: tuple[int, ...]) -> float:
    """How much slower a single-thread matmul loop runs on the trainer's core while the rollout core runs
    one too (1.0: independent cores, as separate GPU clusters are). On these VMs the two vCPUs share a
    physical core's resources, so training overlapped with rollout runs slower than training alone."""
    if not trainer_cpus or not rollout_cpus:
        return float("nan")
    import multiprocessing as mp
    import torch
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    try:
        os.sched_setaffinity(0, set(trainer_cpus[:1]))
        torch.set_num_threads(1)
        alone = _matmul_seconds()
        busy = mp.get_context("spawn").Process(target=_busy, args=(rollout_cpus[0], 3 * alone + 2.0))
        busy.start()
        time.sleep(1.2)  # the spawned process imports torch first
        shared = _matmul_seconds()
        busy.terminate()
        busy.join()
        return shared / alone
    finally:
        os.sched_setaffinity(0, before)
        torch.set_num_threads(threads)
