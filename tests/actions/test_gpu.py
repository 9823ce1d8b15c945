"""GPU manager: buddy chunks prefer warm chunks, LRU restore/evict of real torch modules under a memory cap."""
import asyncio

import pytest
import torch

from rollart.actions.action import Action, amdahl
from rollart.actions.basic import CountPool
from rollart.actions.gpu import DeviceCache, GpuPool, TorchServiceHost, gpus_of
from rollart.actions.runtime import ActionScheduler


def test_buddy_split_and_merge():
    pool = GpuPool(nodes=1)
    a = pool.acquire(1)
    b = pool.acquire(2)
    c = pool.acquire(3)  # rounds up to a 4-chunk
    assert (a[2], b[2], c[2]) == (1, 2, 4) and pool.free() == 1
    assert len({g for ch in (a, b, c) for g in gpus_of(ch)}) == 7  # disjoint GPUs
    for ch in (b, a, c):
        pool.release(ch)
    assert pool.free_chunks == {(0, 0, 8)}


def make_services():
    return {f"teacher{i}": (lambda i=i: torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)))
            for i in range(4)}


def test_lru_eviction_under_memory_cap_and_warm_preference():
    host = TorchServiceHost(make_services())
    size = host.bytes["teacher0"]
    pool = GpuPool(nodes=1)
    # each GPU holds 2 one-GPU instances' worth of weights
    cache = DeviceCache(pool, gpu_memory=2 * size, service_bytes=host.bytes,
                        restore=host.restore, evict=host.evict)
    chunk = (0, 0, 1)
    _, restored = cache.ensure("teacher0", chunk)
    assert restored
    cache.ensure("teacher1", chunk)
    cache.ensure("teacher0", chunk)  # hit: teacher0 becomes most recent
    assert cache.hits == 1
    cache.ensure("teacher2", chunk)  # must evict the LRU one: teacher1
    assert {s for s, c in cache.resident} == {"teacher0", "teacher2"} and cache.evictions == 1
    assert cache.used((0, 0)) <= 2 * size
    assert host.live_bytes(cache) == pytest.approx(2 * size)  # real modules resident, nothing leaked
    # the pool prefers the chunk already holding the service
    cache.ensure("teacher3", (0, 4, 1))
    got = pool.acquire(1, Action({}, service="teacher3"))
    assert got == (0, 4, 1)


def test_restored_module_computes_same_as_host_copy():
    host = TorchServiceHost(make_services())
    cache = DeviceCache(GpuPool(nodes=1), gpu_memory=1e9, service_bytes=host.bytes,
                        restore=host.restore, evict=host.evict)
    module, _ = cache.ensure("teacher1", (0, 0, 2))
    reference = make_services()["teacher1"]()
    reference.load_state_dict(host.host["teacher1"])
    x = torch.randn(3, 64)  # (B, D)
    assert torch.equal(module(x), reference(x))


async def test_gpu_actions_through_scheduler_respect_units_and_memory():
    host = TorchServiceHost(make_services())
    pool = GpuPool(nodes=1)
    cache = DeviceCache(pool, gpu_memory=1.5 * host.bytes["teacher0"], service_bytes=host.bytes,
                        restore=host.restore, evict=host.evict)
    sched = ActionScheduler({"gpu": pool})
    busy: set = set()

    def logprob_action(service):
        async def payload(grant):
            chunk = grant["gpu"]
            mine = set(gpus_of(chunk))
            assert not (busy & mine)  # at most one action per GPU at a time
            busy.update(mine)
            module, _ = cache.ensure(service, chunk)
            with torch.no_grad():
                out = module(torch.randn(4, 64)).sum().item()  # (B, 8) -> scalar
            await asyncio.sleep(0.01)
            busy.difference_update(mine)
            return chunk[2], out
        return Action({}, key="gpu", units=(1, 2, 4, 8), elasticity=amdahl(0.7), t_ori=1.0,
                      service=service, kind="logprob", payload=payload)

    results = await asyncio.gather(*(sched.submit(logprob_action(f"teacher{i % 4}")) for i in range(24)))
    assert len(results) == 24 and all(units in (1, 2, 4, 8) for units, _ in results)
    assert pool.peak <= 8 and pool.free_chunks == {(0, 0, 8)}
    for g in range(8):
        assert cache.used((0, g)) <= 1.5 * host.bytes["teacher0"] + 1e-6
    assert cache.restores >= 4  # every service was restored at least once
