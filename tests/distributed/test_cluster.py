"""Cluster over real actor processes: workers placed on their classes (with fallback when a pool is exhausted),
bound again after a restart, devices seen through CUDA_VISIBLE_DEVICES, and devices released when a worker is
dead for good or the start fails."""
import asyncio
import os
import signal

import pytest

from rollart.actors import ActorDeadError, RestartPolicy
from rollart.distributed import Cluster, ClusterError, ResourceManager

from sample_workers import Bound, Info, Plain, Sleep


async def test_placement_falls_back_when_pool_is_exhausted(system, capsys):
    rm = ResourceManager({"H800": 1, "H20": 1})
    gen = await Cluster(Bound, rm, n=2, system=system, mode="inprocess", placement=["H800", "H800"])
    assert [m.hw_class for m in gen.members] == ["H800", "H20"]
    assert "fallback: H800 exhausted" in rm.binding_table()
    assert "Bound-1" in capsys.readouterr().out
    await gen.shutdown()
    assert rm.free_summary() == {"H800": 1, "H20": 1}


async def test_a_role_without_placement_goes_to_its_default_class(system):
    rm = ResourceManager({"H800": 1, "H20": 1, "cpu": 1})
    gen = await Cluster(Bound, rm, n=1, system=system, mode="inprocess", verbose=False)  # role "generate"
    assert [m.hw_class for m in gen.members] == ["H20"]  # bandwidth-optimised: the generation role's default
    await gen.shutdown()


async def test_a_worker_dead_for_good_releases_its_devices_and_its_calls_fail(system):
    rm = ResourceManager({"H20": 1})
    gen = await Cluster(Bound, rm, n=1, system=system, restart=RestartPolicy(max_restarts=0), verbose=False)
    pending = asyncio.ensure_future(gen.handle(0).send(Sleep(30)))
    await asyncio.sleep(0.3)
    os.kill(gen.members[0].handle.pid, signal.SIGKILL)
    with pytest.raises(ActorDeadError):
        await asyncio.wait_for(pending, 15)
    for _ in range(600):  # hang guard (30 s), not a speed assertion
        if not gen.members[0].alive:
            break
        await asyncio.sleep(0.05)
    assert not gen.members[0].alive and rm.free_summary() == {"H20": 1}
    assert "dead:" in gen.describe()
    await gen.shutdown()


async def test_restarted_worker_keeps_its_rank_and_hardware(system):
    rm = ResourceManager({"H800": 1, "H20": 1})
    gen = await Cluster(Bound, rm, n=2, system=system, restart=RestartPolicy(max_restarts=1, backoff=0.01),
                        placement=["H800", "H20"], verbose=False)
    h20 = gen.members[1]
    before = await h20.handle.send(Info())
    os.kill(h20.handle.pid, signal.SIGKILL)
    for _ in range(600):  # hang guard (30 s), not a speed assertion
        if h20.handle.restarts == 1 and h20.handle.state == "ready":
            break
        await asyncio.sleep(0.05)
    after = await h20.handle.send(Info())  # the fresh instance was bound again
    assert after == before and after["hw_class"] == "H20" and after["rank"] == 1 and after["name"] == "Bound-1"
    await gen.shutdown()


async def test_plain_class_gets_per_class_kwargs_and_its_hardware(system):
    rm = ResourceManager({"H800": 1, "H20": 1})
    c = await Cluster(Plain, rm, n=2, system=system, placement=["H800", "H20"], worker_kwargs=dict(label="x"),
                      worker_kwargs_for=lambda hw: {"speed": hw.lower()}, verbose=False)
    infos = [await c.handle(r).send(Info()) for r in (0, 1)]
    assert [(i["label"], i["speed"], i["hw_class"]) for i in infos] == [("x", "h800", "H800"), ("x", "h20", "H20")]
    with pytest.raises(ClusterError, match="no started rank 2"):
        c.handle(2)
    await c.shutdown()
    assert rm.free_summary() == {"H800": 1, "H20": 1}


async def test_failed_start_releases_every_binding(system):
    rm = ResourceManager({"H20": 1})
    with pytest.raises(Exception, match="unexpected keyword"):
        await Cluster(Plain, rm, n=1, system=system, mode="inprocess", worker_kwargs=dict(nope=1), verbose=False)
    assert rm.free_summary() == {"H20": 1} and rm.bindings == []


async def test_a_gpu_bound_worker_process_sees_its_devices_through_cuda_visible_devices(system, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rm = ResourceManager({"H800": [1, 3], "cpu": 1})
    gpu = await Cluster(Plain, rm, n=2, system=system, placement=["H800", "H800"], verbose=False)
    cpu = await Cluster(Plain, rm, n=1, name="cpu-plain", system=system, placement=["cpu"], verbose=False)
    assert [(await gpu.handle(r).send(Info()))["cuda_visible_devices"] for r in (0, 1)] == ["1", "3"]
    assert (await cpu.handle().send(Info()))["cuda_visible_devices"] is None  # CPU class: environment unchanged
    await gpu.shutdown()
    await cpu.shutdown()
