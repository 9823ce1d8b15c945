"""Covers rollart.distributed.ray_backend on a local multi-node Ray cluster (a head, an H800 node, an H20 node):
a FrozenLake run with cluster.backend=ray places every actor on a node of its class, trains, and keeps going
when the H20 node is removed mid-run (its worker restarts on a new H20 node); a plan places actors as planned on
Ray (a bundle per data-parallel trainer rank), with CURVE when actors connect beyond loopback, and weights move
over the weight plane on the node's IP; a trainer killed on its node resumes from its checkpoint; losing the node
of the trainer and the weight store moves both to another node and the run goes on."""
import asyncio
import dataclasses
import datetime
import json
import logging
import time
from collections import Counter
from typing import Callable

import pytest

ray = pytest.importorskip("ray", reason="the ray tests need Ray: pip install -e '.[ray]'")
from ray.cluster_utils import Cluster as RayCluster  # noqa: E402

import envs  # noqa: E402,F401  (registers rollart/FrozenLake-v0)
from rollart.actors.curve import is_loopback  # noqa: E402
from rollart.distributed.cluster_config import ClusterConfig  # noqa: E402
from rollart.pipeline import Coordinator, PipelineConfig  # noqa: E402
from rollart.pipeline.run_actors import start_actors  # noqa: E402
from rollart.pipeline.prepare import prepare_run  # noqa: E402
from rollart.weightplane.sync import WeightSync  # noqa: E402
from rollart.rollout.proxy_config import ProxyConfig  # noqa: E402
from rollart.rollout.group_scheduler import SchedulerConfig  # noqa: E402
from rollart.tools.make_tiny_model import make_tiny_model  # noqa: E402
from rollart.trainer import TrainerConfig  # noqa: E402
from rollart.messages import GetStats, GetVersion, WeightsDigest  # noqa: E402

from tests.distributed.two_class import FROZEN, make_plan, planned, with_train_ranks  # noqa: E402

pytestmark = pytest.mark.ray

# slow env turns keep the run going long enough to lose a node in the middle of it
SLOW = dataclasses.replace(FROZEN, name="SlowLake", faults={"mean": 0.1, "std": 0.02})
WAITING = "actor gen-1 (H20) is not placed yet: the run waits until a Ray node with free H20 capacity joins"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "tiny"
    make_tiny_model(out, hidden=64, layers=2, heads=1, kv_heads=1, seed=0)
    return str(out)


@pytest.fixture
def ray_cluster():
    """Head + one node per class. Each class node has exactly the CPUs its class's actors reserve, so the
    trainer and the weight store (class cpu) land on the head."""
    made = []

    def make(head_cpus: int, h800: tuple[int, int], h20: tuple[int, int]):
        cluster = RayCluster(initialize_head=True, head_node_args={"num_cpus": head_cpus})
        nodes = {"H800": cluster.add_node(num_cpus=h800[0], resources={"H800": h800[1]}),
                 "H20": cluster.add_node(num_cpus=h20[0], resources={"H20": h20[1]})}
        made.append(cluster)
        return cluster, nodes

    yield make
    if ray.is_initialized():
        ray.shutdown()
    for cluster in made:
        cluster.shutdown()


log = logging.getLogger("tests.ray_backend")

BUDGET_S = 220.0
"""No wait of a test runs past this many seconds from the test's first wait: a stuck run fails in the test's own
words (which wait, since when, the run's state) before pytest's 300 s timeout kills it."""
PROGRESS_EVERY_S = 10.0


def _say(msg: str, *args) -> None:
    log.warning("[%s] " + msg, datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3], *args)


def _where(task: asyncio.Task) -> str:
    """The innermost frame a task is suspended in (file:line function)."""
    coro, frame = task.get_coro(), None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or frame
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}" if frame else "?"


def _outcome(run: asyncio.Task) -> str:
    if run.cancelled():
        return "cancelled"
    exc = run.exception()
    return f"{type(exc).__name__}: {exc}" if exc else "finished"


def run_status(co: Coordinator) -> str:
    """One line: the step, the weights version, the proxy's suspension and each inference worker's state (and how
    many incarnations of it Ray placed)."""
    parts = co.parts
    if parts is None:
        return f"step {co.step}, actors not started yet"
    try:
        proxy, placed = parts.actors.proxy, parts.actors.backend.placements
        workers = ", ".join(
            f"{w.name} {getattr(w.handle, 'state', '?')} (restarts {w.handle.restarts}, placed "
            f"{len(placed.get(w.name, []))}x, {'dead' if w.dead else 'healthy' if w.healthy else 'unhealthy'} "
            "for the proxy)" for w in proxy.workers.values())
        return f"step {co.step}, weights version {parts.weights.version}, proxy suspended={proxy.suspended}; {workers}"
    except Exception as e:  # noqa: BLE001 - a diagnostic line must not fail the test
        return f"step {co.step} ({type(e).__name__} reading the rest: {e})"


class Waits:
    """The test's waits on a run, each bounded and said with the wall-clock time: when it starts, every
    PROGRESS_EVERY_S while it lasts (with ``status()``), and when it ends. One that runs out logs where every task
    of the loop is suspended and fails in one line naming what it waited for."""

    def __init__(self, status: Callable[[], str] = lambda: "", budget_s: float = BUDGET_S):
        self.status = status
        self.deadline = time.monotonic() + budget_s

    async def until(self, what: str, done: Callable[[], bool], timeout_s: float, run: asyncio.Task | None = None,
                    run_may_end: bool = False, poll_s: float = 0.2) -> None:
        start = time.monotonic()
        limit = min(start + timeout_s, self.deadline)
        _say("waiting for %s (up to %.0f s; %s)", what, limit - start, self.status())
        said = start
        while not done():
            now = time.monotonic()
            if run is not None and run.done() and not run_may_end:
                pytest.fail(f"the run ended ({_outcome(run)}) while the test waited for {what} "
                            f"({self.status()})", pytrace=False)
            if now >= limit:
                at = Counter(_where(task) for task in asyncio.all_tasks() if not task.done())
                for where, n in at.most_common():
                    _say("%d task(s) suspended at %s", n, where)
                pytest.fail(f"timed out after {now - start:.0f} s waiting for {what} ({self.status()})",
                            pytrace=False)
            if now - said >= PROGRESS_EVERY_S:
                said = now
                _say("still waiting for %s after %.0f s (%s)", what, now - start, self.status())
            await asyncio.sleep(poll_s)  # waiting for a state, not timing anything
        _say("done waiting for %s after %.1f s (%s)", what, time.monotonic() - start, self.status())

    async def finished(self, run: asyncio.Task, timeout_s: float = 150.0):
        """The run's result, once it ends."""
        await self.until("the run to reach its last step and end", run.done, timeout_s, run, run_may_end=True)
        return run.result()


async def started_until_step(co: Coordinator, step: int, waits: Waits) -> asyncio.Task:
    """Start ``co``'s run and return it once it has trained ``step`` steps (failing if it ended before)."""
    run = asyncio.create_task(co.run(), name="run")
    await waits.until(f"the run to train {step} steps", lambda: co.step >= step, 150.0, run)
    return run


async def stopped(run: asyncio.Task) -> None:
    """A test that failed midway cancels its run, waiting a bounded time for it to tear down."""
    if run.done():
        return
    run.cancel()
    done, _ = await asyncio.wait({run}, timeout=20)
    if not done:
        _say("the run did not stop within 20 s of being cancelled: at %s", _where(run))


def node_of(placements: dict, name: str, incarnation: int = -1) -> str:
    return placements[name][incarnation]["node_id"]


def test_run_places_actors_by_class_and_survives_losing_a_node(tmp_path, tiny_model, ray_cluster, caplog):
    caplog.set_level(logging.WARNING, logger="rollart.distributed")
    cluster, nodes = ray_cluster(head_cpus=2, h800=(1, 1), h20=(1, 1))
    head = cluster.head_node.node_id
    cfg = PipelineConfig(
        model=tiny_model, total_steps=14, batch_groups=2, rollout=SchedulerConfig(group_size=4, max_concurrency=16),
        trainer=TrainerConfig(num_threads=1), eval_every=0, eval_episodes=2, logdir=str(tmp_path), run_name="ray",
        quiet=True, num_inference_workers=2, hw_classes=("H800", "H20"), heartbeat_timeout_s=60,
        proxy=ProxyConfig(restart_timeout_s=3),  # requests stuck on the lost worker move to gen-0 after 3 s
        cluster=ClusterConfig(backend="ray", address=cluster.address, capacity_wait_log_s=2))
    coordinator = Coordinator(cfg, [SLOW])

    async def drive():
        waits = Waits(lambda: run_status(coordinator))
        run = await started_until_step(coordinator, 3, waits)  # trained a few steps on both nodes
        try:
            placed = {name: list(runs) for name, runs in coordinator.parts.actors.backend.placements.items()}
            said = caplog.text.count(WAITING)  # a slow first start may have said it already
            _say("removing the H20 node (gen-1's) at step %d", coordinator.step)
            cluster.remove_node(nodes["H20"])  # gen-1's node is gone; its requests go to gen-0 meanwhile
            lost_at = coordinator.step
            _say("removed the H20 node at step %d", lost_at)
            gen1 = coordinator.parts.actors.workers[1].handle
            await waits.until("gen-1 to leave state 'ready' (its Ray host reported dead)",
                              lambda: gen1.state != "ready", 60.0, run)
            # the restart waits for H20 capacity, saying so; training goes on with gen-0 meanwhile
            await waits.until("the restart of gen-1 to say it waits for H20 capacity",
                              lambda: caplog.text.count(WAITING) != said, 60.0, run)
            await waits.until(f"a training step past step {lost_at} while gen-1 waits for capacity (only gen-0 "
                              "serves)", lambda: coordinator.step > lost_at, 90.0, run)
            new = cluster.add_node(num_cpus=1, resources={"H20": 1})  # capacity returns: gen-1 restarts there
            _say("added a new H20 node %s at step %d", new.node_id[:12], coordinator.step)
            await waits.until("gen-1 to be ready again on the new H20 node", lambda: gen1.state == "ready", 120.0,
                              run)
            return placed, lost_at, new.node_id, await waits.finished(run), said
        finally:
            await stopped(run)

    placed, lost_at, new_h20, result, said = asyncio.run(drive())
    # 1) each actor on a node of its class
    assert node_of(placed, "gen-0") == nodes["H800"].node_id
    assert node_of(placed, "gen-1") == nodes["H20"].node_id
    assert node_of(placed, "trainer-0") == head and node_of(placed, "weight-store-0") == head
    on_disk = json.loads((tmp_path / "ray" / "placement.json").read_text())
    # 2) after the loss gen-1 ran again on the new H20 node, and nothing else moved
    assert [p["node_id"] for p in on_disk["gen-1"]] == [nodes["H20"].node_id, new_h20]
    assert len(on_disk["gen-0"]) == len(on_disk["trainer-0"]) == len(on_disk["weight-store-0"]) == 1
    # 3) it trained every step, through the loss, and lost no accepted sample
    assert result.steps == 14 and result.version == 14 and lost_at < 14
    stats = result.buffer
    assert stats["trained"] == 14 * cfg.batch_size
    assert stats["accepted"] == stats["trained"] + stats["evicted"] + stats["buffered"]
    assert all(h["losses/policy"] == h["losses/policy"] for h in result.history)  # a loss every step (no NaN)
    assert caplog.text.count(WAITING) == said + 1  # one line, not one per second


def test_plan_places_actors_as_planned_on_ray_with_curve(tmp_path, tiny_model, ray_cluster):
    _, doc = make_plan(tmp_path)
    doc = with_train_ranks(doc)  # two data-parallel trainer ranks, one per H800
    path = tmp_path / "plan-dp.json"
    path.write_text(json.dumps(doc))
    path = str(path)
    gen_classes, gen_ids, gen_dp = planned(doc, "actor_gen")
    train_classes, train_ids, train_dp = planned(doc, "actor_train")
    assert gen_classes == {"H20"} and train_classes == {"H800"} and train_dp == 2, doc  # the two-class plan
    cluster, nodes = ray_cluster(head_cpus=1, h800=(2, 2), h20=(gen_dp, 2))
    ip = ray.util.get_node_ip_address()
    bind_host = "" if is_loopback(f"tcp://{ip}:0") else ip  # beyond loopback: CURVE
    cfg = PipelineConfig(model=tiny_model, placement=path, rollout=SchedulerConfig(group_size=2, max_concurrency=4),
                         trainer=TrainerConfig(num_threads=1), logdir=str(tmp_path), run_name="plan", quiet=True,
                         heartbeat_timeout_s=60,
                         cluster=ClusterConfig(backend="ray", address=cluster.address, bind_host=bind_host))

    async def start():
        prepared = prepare_run(cfg)
        c = await start_actors(prepared.config, prepared.plan)
        try:
            version = await c.trainer.send(GetVersion())  # the trainer answers over the (CURVE) socket
            # a weight version moves trainer -> store -> workers on the weight plane, bound where the actors are
            sync = WeightSync(c.trainer, c.store, c.proxy, bucket_bytes=64 << 10)
            stats = await sync.publish(1)
            await sync.update_workers()
            trainer = await c.trainer.send(WeightsDigest())
            pulls = []
            for _, _, handle in c.workers:
                assert await handle.send(WeightsDigest()) == trainer
                pulls.append((await handle.send(GetStats()))["last_weight_pull"])
            moved = (stats.bytes, sync.store_address, sync.trainer_info.address, pulls)
            return dict(c.backend.placements), c.backend.curve_dir, c.system.endpoint, version, moved
        finally:
            await c.close()

    placements, curve_dir, endpoint, version, (model_bytes, store, trainer, pulls) = asyncio.run(start())
    assert version == 0
    if bind_host:
        assert curve_dir is not None and not is_loopback(endpoint)
        assert store.startswith(f"tcp://{ip}:") and trainer.startswith(f"tcp://{ip}:")  # what other nodes reach
    assert len(pulls) == gen_dp and all(p["version"] == 1 and p["bytes"] == model_bytes for p in pulls), pulls
    assert all(not is_loopback(s) for p in pulls for s in p["sources"]) == bool(bind_host), pulls
    for i in range(gen_dp):
        assert placements[f"gen-{i}"][0]["node_id"] == nodes["H20"].node_id
    assert sorted(placements[f"gen-{i}"][0]["bundle"] for i in range(gen_dp)) == list(range(gen_dp))
    assert [placements[f"trainer-{r}"][0]["node_id"] for r in range(2)] == [nodes["H800"].node_id] * 2
    assert sorted(placements[f"trainer-{r}"][0]["bundle"] for r in range(2)) == [0, 1]  # a bundle per rank
    assert placements["weight-store-0"][0]["node_id"] == cluster.head_node.node_id


def test_a_trainer_killed_on_its_node_resumes_from_its_checkpoint(tmp_path, tiny_model, ray_cluster, caplog):
    """The trainer's process on its Ray node is SIGKILLed mid-run: it restarts in its bundle, reloads the newest
    checkpoint, and the run finishes (weights moving over the weight plane on the node's IP, with CURVE)."""
    import os
    import signal

    STEPS = 10  # room after step 2: under load the first wait returned at step 4 of a 4-step run (2026-11-28)
    cluster, nodes = ray_cluster(head_cpus=2, h800=(1, 1), h20=(1, 1))
    ip = ray.util.get_node_ip_address()
    cfg = PipelineConfig(
        model=tiny_model, total_steps=STEPS, batch_groups=1, rollout=SchedulerConfig(group_size=2, max_concurrency=4),
        trainer=TrainerConfig(num_threads=1), eval_every=0, eval_episodes=1, eval_at_end=False, checkpoint_every=1,
        logdir=str(tmp_path), run_name="kill", quiet=True, heartbeat_timeout_s=60,
        cluster=ClusterConfig(backend="ray", address=cluster.address,
                              bind_host="" if is_loopback(f"tcp://{ip}:0") else ip))
    co = Coordinator(cfg, [FROZEN])

    async def drive():
        waits = Waits(lambda: run_status(co))
        run = await started_until_step(co, 2, waits)
        try:
            first = co.parts.actors.backend.placements["trainer-0"][-1]
            # the kill must land mid-run: a loaded machine can let the run pass step 2 before the wait sees it
            assert co.step < STEPS, f"the run reached its last step ({co.step}) before the kill"
            _say("killing the trainer's process %s at step %d", first["pid"], co.step)
            os.kill(first["pid"], signal.SIGKILL)  # the process Ray runs on the trainer's node
            return first, await waits.finished(run)
        finally:
            await stopped(run)

    with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
        first, result = asyncio.run(drive())
    runs = co.parts.actors.backend.placements["trainer-0"]
    assert len(runs) == 2 and runs[1]["pid"] != first["pid"] and runs[1]["node_id"] == first["node_id"]
    assert co.parts.recovery.counters["trainer_restarts"] == 1
    assert "is back from step_0000000" in caplog.text, caplog.text  # reloaded a checkpoint, not the initial weights
    assert result.version == STEPS and [h["step"] for h in result.history] == list(range(1, STEPS + 1))
    assert (tmp_path / "kill" / "checkpoints" / f"step_{STEPS:08d}").is_dir()


def test_a_run_survives_losing_the_node_of_its_trainer_and_weight_store(tmp_path, tiny_model, ray_cluster, caplog):
    """The node holding the trainer and the weight store is removed mid-run while another CPU node has room: both
    restart there (the store on a new address the coordinator learns and workers follow), the trainer reloads
    the newest checkpoint from the run's folder (one filesystem for every node here), and the run reaches its
    last step without losing an accepted sample."""
    STEPS = 10  # room after step 2: under load the first wait returned at step 5 of a 5-step run (2026-11-28)
    cluster = RayCluster(initialize_head=True, head_node_args={"num_cpus": 0})  # nothing runs on the head
    try:
        h800 = cluster.add_node(num_cpus=1, resources={"H800": 1})
        services = cluster.add_node(num_cpus=2)  # the trainer and the weight store (class cpu)
        ip = ray.util.get_node_ip_address()
        bind_host = "" if is_loopback(f"tcp://{ip}:0") else ip  # beyond loopback the store's address is its own
        cfg = PipelineConfig(
            model=tiny_model, total_steps=STEPS, batch_groups=1, rollout=SchedulerConfig(group_size=2, max_concurrency=4),
            trainer=TrainerConfig(num_threads=1), eval_every=0, eval_at_end=False, checkpoint_every=1,
            logdir=str(tmp_path), run_name="svc", quiet=True, num_inference_workers=1, hw_classes=("H800",),
            heartbeat_timeout_s=60, cluster=ClusterConfig(backend="ray", address=cluster.address, bind_host=bind_host))
        co = Coordinator(cfg, [FROZEN])

        async def drive():
            waits = Waits(lambda: run_status(co))
            run = await started_until_step(co, 2, waits)
            try:
                # the removal must land mid-run: a loaded machine can let the run pass step 2 before the wait sees it
                assert co.step < STEPS, f"the run reached its last step ({co.step}) before the node was removed"
                spare = cluster.add_node(num_cpus=2)
                before = co.parts.weights.store_address
                _say("removing the node of the trainer and the weight store at step %d", co.step)
                cluster.remove_node(services)  # the trainer's and the store's node is gone
                return spare.node_id, before, await waits.finished(run)
            finally:
                await stopped(run)

        with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
            spare, store_before, result = asyncio.run(drive())
        placed = co.parts.actors.backend.placements
        for name in ("trainer-0", "weight-store-0"):
            assert [p["node_id"] for p in placed[name]] == [services.node_id, spare], (name, placed[name])
        assert [p["node_id"] for p in placed["gen-0"]] == [h800.node_id]  # the worker's node was not touched
        assert co.parts.recovery.counters["trainer_restarts"] == 1 and co.parts.recovery.counters["store_restarts"] >= 1
        assert "is back from step_" in caplog.text, caplog.text  # resumed from a checkpoint, not the initial weights
        if bind_host:  # the coordinator learned where the restarted store serves
            assert co.parts.weights.store_address != store_before and "serves weights at" in caplog.text
        assert result.version == STEPS and [h["step"] for h in result.history] == list(range(1, STEPS + 1))
        stats = result.buffer
        assert stats["trained"] == STEPS * cfg.batch_size
        assert stats["accepted"] == stats["trained"] + stats["evicted"] + stats["buffered"]
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
