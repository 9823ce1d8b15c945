"""Cluster over real actor processes: execute_all aggregation, one/round_robin, hw_mapping routing and fallback, dead-worker removal, serverless calls to a real aiohttp endpoint."""
import asyncio
import os
import signal

import numpy as np
import pytest
from aiohttp import web

from rollart.actors import ActorDeadError, RestartPolicy
from rollart.distributed import Cluster, ClusterError, ResourceManager, ServerlessError

from sample_workers import GradWorker, HeteroGen, Plain, Scorer


async def test_execute_all_broadcasts_and_aggregates(system, capsys):
    rm = ResourceManager({"H800": 2, "H20": 4})
    train = await Cluster(GradWorker, rm, n=2, system=system)
    x = np.arange(4, dtype=np.float32)  # (4,) numpy: keeps torch's slow import out of the worker processes
    grads = await train.compute_gradients(x)
    assert [g.tolist() for g in grads] == [[0, 1, 2, 3], [0, 2, 4, 6]]  # one per worker, rank order
    assert await train.loss_sum(x) == 6.0 * 1 + 6.0 * 2
    pids = await train.execute_all("worker_info")
    assert [p["hw_class"] for p in pids] == ["H800", "H800"] and [p["rank"] for p in pids] == [0, 1]
    out = capsys.readouterr().out
    assert "cluster GradWorker" in out and "GradWorker-0" in out and ".compute_gradients() -> execute_all" in out
    await train.shutdown()
    assert rm.free_summary() == {"H800": 2, "H20": 4}


async def test_one_and_round_robin(system):
    rm = ResourceManager({"cpu": 3}, role_hw_class={"train": "cpu"})
    c = await Cluster(GradWorker, rm, n=3, system=system, mode="inprocess", verbose=False)
    assert sorted([await c.rr_whoami() for _ in range(6)]) == sorted([f"GradWorker-{i}" for i in range(3)] * 2)
    names = await asyncio.gather(*(c.whoami() for _ in range(9)))
    assert set(names) == {f"GradWorker-{i}" for i in range(3)}  # least-loaded spreads concurrent calls
    with pytest.raises(AttributeError):
        c.not_a_method
    with pytest.raises(ClusterError, match="no rank 7"):
        await c.execute_rank(7, "whoami")


async def test_hw_mapping_routes_by_task_and_falls_back_when_preferred_worker_dies(system):
    rm = ResourceManager({"H800": 1, "H20": 2})
    gen = await Cluster(HeteroGen, rm, n=3, system=system, restart=RestartPolicy(max_restarts=0),
                        placement={"H800": 1, "H20": 2}, verbose=False)
    out = await asyncio.gather(*(gen.generate("abc", task="FrozenLake") for _ in range(4)))
    assert {o["hw"] for o in out} == {"H800"} and out[0]["text"] == "cba"
    out = await asyncio.gather(*(gen.generate("abc", task="SWE") for _ in range(4)))
    assert {o["hw"] for o in out} == {"H20"}  # unknown task -> "default"
    assert {o["worker"] for o in out} == {"HeteroGen-1", "HeteroGen-2"}
    out = await gen.generate("abc")  # no task at all -> default
    assert out["hw"] == "H20"

    h800 = gen.members[0]
    assert h800.hw_class == "H800"
    os.kill((await h800.handle.call("worker_info")) and h800.handle.pid, signal.SIGKILL)
    for _ in range(600):  # hang guard (30 s), not a speed assertion
        if not h800.alive:
            break
        await asyncio.sleep(0.05)
    assert not h800.alive and "dead" in h800.binding.note
    assert rm.free_summary()["H800"] == 1  # its device went back to the pool
    out = await gen.generate("abc", task="FrozenLake")
    assert out["hw"] == "H20"  # compatible fallback
    assert gen.routed[("generate", "FrozenLake", "H800")] == 4
    assert gen.routed[("generate", "FrozenLake", "H20")] == 1
    assert "dead" in gen.describe()


async def test_hw_mapping_spills_over_when_preferred_class_is_busy(system):
    rm = ResourceManager({"H800": 1, "H20": 1})
    gen = await Cluster(HeteroGen, rm, n=2, system=system, mode="inprocess", max_inflight_per_worker=1,
                        verbose=False)
    outs = await asyncio.gather(*(gen.generate("x", task="FrozenLake", delay=0.3) for _ in range(2)))
    assert sorted(o["hw"] for o in outs) == ["H20", "H800"]  # second call found H800 exhausted


async def test_placement_falls_back_when_pool_is_exhausted(system, capsys):
    rm = ResourceManager({"H800": 1, "H20": 1})
    gen = await Cluster(HeteroGen, rm, n=2, system=system, mode="inprocess", placement=["H800", "H800"])
    assert [m.hw_class for m in gen.members] == ["H800", "H20"]
    assert "fallback: H800 exhausted" in rm.binding_table()
    assert "HeteroGen-1" in capsys.readouterr().out


async def test_all_workers_dead_gives_clear_error(system):
    rm = ResourceManager({"H20": 1})
    gen = await Cluster(HeteroGen, rm, n=1, system=system, restart=RestartPolicy(max_restarts=0), verbose=False)
    os.kill(gen.members[0].handle.pid, signal.SIGKILL)
    for _ in range(600):  # hang guard (30 s), not a speed assertion
        if not gen.members[0].alive:
            break
        await asyncio.sleep(0.05)
    with pytest.raises(ClusterError, match="no live worker"):
        await gen.generate("x")


@pytest.fixture
async def reward_endpoint():
    """A real aiohttp serverless endpoint speaking the rollart protocol; fails the first request with 503."""
    calls = []

    async def handler(request: web.Request) -> web.Response:
        calls.append(request.match_info["fn"])
        if request.headers.get("Authorization") != "Bearer s3cret":
            return web.json_response({"ok": False, "error": "unauthorized"}, status=401)
        if len(calls) == 1:
            return web.Response(status=503, text="warming up")
        body = await request.json()
        traj, scale = body["args"][0], body["kwargs"].get("scale", 1.0)
        if traj == ["bad"]:
            return web.json_response({"ok": False, "error": "ValueError: bad trajectory"})
        return web.json_response({"ok": True, "result": len(traj) * scale})

    app = web.Application()
    app.router.add_post("/call/{fn}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", calls
    await runner.cleanup()


async def test_register_serverless_calls_the_http_endpoint(system, reward_endpoint):
    url, calls = reward_endpoint
    rm = ResourceManager({"cpu": 2, "serverless": {"url": url, "token": "s3cret"}})
    rewards = await Cluster(Scorer, rm, n=1, system=system, verbose=False)
    assert rewards.members[0].hw_class == "serverless"
    assert await rewards.compute_rewards([1, 2, 3], scale=0.5) == 1.5  # after one 503 retry
    assert calls == ["compute_rewards", "compute_rewards"]
    with pytest.raises(ServerlessError, match="bad trajectory"):
        await rewards.compute_rewards(["bad"])
    # inside the worker process, self.reward_proxy calls the same function
    assert await rewards.score_via_proxy([1, 2]) == 4.0
    assert calls[-1] == "compute_rewards"
    await rewards.shutdown()


async def test_serverless_errors(system, reward_endpoint):
    url, _ = reward_endpoint
    rm = ResourceManager({"serverless": url})  # no token
    rewards = await Cluster(Scorer, rm, n=1, system=system, mode="inprocess", verbose=False)
    with pytest.raises(ServerlessError, match="HTTP 401.*unauthorized"):
        await rewards.compute_rewards([1])
    dead = ResourceManager({"serverless": "http://127.0.0.1:9"})  # nothing listens on port 9
    rewards2 = await Cluster(Scorer, dead, n=1, system=system, mode="inprocess", verbose=False, name="r2")
    with pytest.raises(ServerlessError, match="unreachable after 5 attempts"):
        await rewards2.compute_rewards([1])
    await rewards.shutdown()
    await rewards2.shutdown()


async def test_serverless_without_endpoint_runs_locally(system):
    rm = ResourceManager({"cpu": 1})
    rewards = await Cluster(Scorer, rm, n=1, system=system, mode="inprocess", verbose=False)
    assert rewards.members[0].hw_class == "cpu"
    assert await rewards.compute_rewards([1, 2]) == 1002.0  # the method body ran on the worker
    assert "no endpoint: local worker" in rewards.describe()
    await rewards.shutdown()


async def test_cluster_dead_calls_fail_with_actor_dead_error(system):
    rm = ResourceManager({"H20": 1})
    gen = await Cluster(HeteroGen, rm, n=1, system=system, restart=RestartPolicy(max_restarts=0), verbose=False)
    pending = asyncio.ensure_future(gen.generate("x", delay=30))
    await asyncio.sleep(0.3)
    os.kill(gen.members[0].handle.pid, signal.SIGKILL)
    with pytest.raises(ActorDeadError):
        await asyncio.wait_for(pending, 15)


async def test_restarted_worker_keeps_its_rank_and_hardware(system):
    rm = ResourceManager({"H800": 1, "H20": 1})
    gen = await Cluster(HeteroGen, rm, n=2, system=system, restart=RestartPolicy(max_restarts=1, backoff=0.01),
                        placement=["H800", "H20"], verbose=False)
    h20 = gen.members[1]
    before = await h20.handle.call("worker_info")
    os.kill(h20.handle.pid, signal.SIGKILL)
    for _ in range(600):  # hang guard (30 s), not a speed assertion
        if h20.handle.restarts == 1 and h20.handle.state == "ready":
            break
        await asyncio.sleep(0.05)
    after = await h20.handle.call("worker_info")  # the fresh instance was bound again
    assert after == before and after["hw_class"] == "H20" and after["rank"] == 1
    out = await gen.generate("ab", task="other")
    assert out == {"worker": "HeteroGen-1", "hw": "H20", "text": "ba"}


async def test_plain_class_gets_per_class_kwargs_and_its_hardware(system):
    rm = ResourceManager({"H800": 1, "H20": 1})
    c = await Cluster(Plain, rm, n=2, system=system, placement=["H800", "H20"], worker_kwargs=dict(label="x"),
                      worker_kwargs_for=lambda hw: {"speed": hw.lower()}, verbose=False)
    assert await c.execute_all("info") == [{"label": "x", "speed": "h800", "hw_class": "H800"},
                                           {"label": "x", "speed": "h20", "hw_class": "H20"}]
    assert await c.handle(1).call("info") == {"label": "x", "speed": "h20", "hw_class": "H20"}
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
    assert [await gpu.handle(r).call("cuda_visible_devices") for r in (0, 1)] == ["1", "3"]
    assert await cpu.handle().call("cuda_visible_devices") is None  # CPU class: environment unchanged
    await gpu.shutdown()
    await cpu.shutdown()
