"""Covers bounded waits: for each role (trainer, trainer ranks, weight store, inference worker, env host, reward
endpoint) a real peer process that took the connection and then never answers (SIGSTOP), and the waiting side's
operation failing within its configured bound in one line that names the role and the setting."""
import asyncio
import os
import signal
import time
from contextlib import contextmanager

import pytest

from rollart.actors import ActorSystem, RestartPolicy
from rollart.messages import FetchVersion, PublishVersion, PutBucket, TrainStep, WeightAddress
from rollart.types import UpdateWeights, WeightBucket

HB = 2.0
"""heartbeat_timeout_s of the cases bounded by liveness."""
LONG_HB = 120.0
"""heartbeat_timeout_s of the cases bounded by something else (the stopped process must not be noticed first)."""
SLACK = 12.0
"""How much later than its bound an operation may fail on a loaded machine; past that it counts as unbounded."""


@contextmanager
def stopped(pid: int):
    """SIGSTOP ``pid`` (its sockets stay open: connections are taken, nothing is answered); SIGKILL it at the end."""
    os.kill(pid, signal.SIGSTOP)
    for _ in range(200):  # the signal lands asynchronously
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                break
        time.sleep(0.01)
    try:
        yield
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def fails_within(awaitable, bound: float) -> tuple[BaseException, float]:
    """The exception ``awaitable`` raised and after how long; a test failure if it is still waiting at
    ``bound`` + SLACK (an unbounded wait) or returns."""
    task = asyncio.ensure_future(awaitable)
    t0 = time.monotonic()
    done, _ = await asyncio.wait({task}, timeout=bound + SLACK)
    if not done:
        task.cancel()
        pytest.fail(f"still waiting {bound + SLACK:g} s later, bound {bound:g} s: an unbounded wait")
    error = task.exception()
    assert error is not None, f"expected a failure, got {task.result()!r}"
    return error, time.monotonic() - t0


def one_line(error: BaseException) -> str:
    text = str(error.args[0]) if error.args else str(error)
    assert text and "\n" not in text, repr(text)
    return text


@pytest.fixture
def policy_folder(tmp_path):
    from rollart.models import save_model
    from tests.trainer.tiny_policy import make_model
    save_model(make_model(0), tmp_path / "policy")
    return str(tmp_path / "policy")


async def test_train_step_on_a_hung_trainer_fails_after_heartbeat_timeout_s(policy_folder):
    from rollart.trainer import TrainerConfig
    from tests.trainer.tiny_policy import make_trajectories
    async with ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=HB, spawn_timeout=300) as system:
        trainer = await system.spawn("rollart.trainer.actor:TrainerActor", TrainerConfig(model_path=policy_folder,
                                     num_threads=1), name="trainer-0", restart=RestartPolicy(max_restarts=0))
        with stopped(trainer.pid):
            error, took = await fails_within(trainer.send(TrainStep(make_trajectories())), HB)
    line = one_line(error)
    assert "'trainer-0' is dead: no heartbeat for" in line and "(heartbeat_timeout_s=2)" in line, line
    assert "its answer to TrainStep" in line and took >= HB - 0.5


async def test_fetch_on_a_hung_weight_store_fails_after_heartbeat_timeout_s():
    async with ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=HB, spawn_timeout=300) as system:
        store = await system.spawn("rollart.weightplane.store:WeightStore", name="weight-store-0",
                                   restart=RestartPolicy(max_restarts=0))
        with stopped(store.pid):
            error, _ = await fails_within(store.send(FetchVersion(1, "tcp://127.0.0.1:9", 60.0, 0)), HB)
    line = one_line(error)
    assert "'weight-store-0' is dead: no heartbeat" in line and "heartbeat_timeout_s=2" in line, line
    assert "its answer to FetchVersion" in line


async def test_a_pull_from_a_hung_weight_store_fails_after_weights_timeout_s():
    """Its process still answers heartbeats for all the run knows: the weight plane's own bound ends the pull."""
    import torch

    from rollart.weightplane.receiver import WeightReceiver
    timeout_s, retries = 1.0, 1
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=LONG_HB, spawn_timeout=300) as system:
        store = await system.spawn("rollart.weightplane.store:WeightStore", name="weight-store-0")
        await store.send(PutBucket(WeightBucket(1, {"w": torch.ones(4)}, 0)))
        await store.send(PublishVersion(1, 1))
        address = await store.send(WeightAddress())
        installed = []

        async def install(weights):
            installed.append(weights.version)
            return weights.version

        receiver = WeightReceiver("worker-0", device="cpu", version=lambda: 0, install=install, store=address,
                                  timeout_s=timeout_s, retries=retries)
        try:
            with stopped(store.pid):
                error, took = await fails_within(receiver.update(UpdateWeights(1, source=address)),
                                                 (retries + 1) * timeout_s)
        finally:
            await receiver.close()
    line = one_line(error)
    assert line.startswith("weight pull of version 1: manifest from the weight store at tcp://"), line
    assert "no answer for 1 s (weights.timeout_s); gave up after 2 attempts" in line, line
    assert installed == [] and took >= (retries + 1) * timeout_s - 0.5


async def test_generation_on_a_hung_inference_worker_fails_after_heartbeat_timeout_s(tiny_model):
    from rollart.inference.worker import InferenceWorker
    from rollart.rollout.proxy import LLMProxy, NoWorkerError, ProxyConfig
    async with ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=HB, spawn_timeout=300) as system:
        worker = await system.spawn(InferenceWorker, dict(model=tiny_model, num_kv_blocks=64), name="gen-0",
                                    restart=RestartPolicy(max_restarts=0))
        proxy = LLMProxy([("gen-0", "cpu", worker)], ProxyConfig(restart_timeout_s=HB))
        with stopped(worker.pid):
            error, _ = await fails_within(proxy.generate("t0", [5, 6, 7], dict(max_tokens=4)), HB)
    line = one_line(error)
    assert isinstance(error, NoWorkerError), repr(error)
    assert "'gen-0': 'dead: no heartbeat for" in line and "heartbeat_timeout_s=2" in line, line


async def test_env_step_on_a_hung_env_host_fails_after_env_host_timeout_s():
    """The host's process is not noticed by heartbeats within the test: env_host_timeout_s alone ends the step."""
    from rollart.rollout.env_client import EnvFailure, EnvPool
    grace = 2.0
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=LONG_HB, spawn_timeout=300) as system:
        pool = await EnvPool.spawn(system, 1, imports=["envs"], grace_s=grace, name="envhost")
        session = await pool.open("rollart/FrozenLake-v0")
        await session.reset(seed=0)
        with stopped(pool.host_objects[0].pid):
            error, took = await fails_within(session.step("D"), grace)
    line = one_line(error)
    assert isinstance(error, EnvFailure) and took >= grace - 0.5
    assert line.startswith("env host envhost-0 did not answer step of env ") and "(env_host_timeout_s)" in line, line


async def test_a_reward_call_to_a_hung_endpoint_fails_after_attempt_timeout_s():
    from rollart.faults.rewards import ScoreBook
    from rollart.rewards.client import ClientConfig, RewardClient
    from rollart.rewards.config import RewardConfig
    from rollart.rewards.dispatch import RewardDispatcher
    from rollart.rewards.local import LocalEndpoint
    from rollart.types import Trajectory
    cfg = RewardConfig(serverless=True, function="episode_reward",
                       functions=("rollart.faults.rewards:episode_reward",))
    endpoint = LocalEndpoint(cfg)
    url = await endpoint.start()
    client = RewardClient(url, config=ClientConfig(retries=1, backoff=0.05, max_backoff=0.1, timeout=1.0))
    dispatcher = RewardDispatcher(ScoreBook(client), timeout_s=60.0)  # the attempts' bound is the one tested
    traj = Trajectory("t0", "g0", "task", [1], [0], [0.0], [-1], status="done", info={"env_return": 1.0})
    try:
        with stopped(endpoint.proc.pid):
            _, took = await fails_within(_raising(dispatcher.score(traj)), 2 * 1.0 + 0.1)
    finally:
        await client.close()
        await endpoint.stop()
    assert traj.status == "failed" and took >= 2.0 - 0.5
    assert traj.reason.startswith(f"reward: RewardCallError: reward call 'episode_reward' to the reward endpoint at "
                                  f"{url} failed after 2 attempts"), traj.reason
    assert traj.reason.endswith("last error: no answer for 1 s (reward.attempt_timeout_s)") and "\n" not in traj.reason


async def _raising(scoring):
    """A scored trajectory as the failure ``fails_within`` expects: the dispatcher marks it instead of raising."""
    traj = await scoring
    raise RuntimeError(traj.reason)


@pytest.mark.slow
async def test_a_collective_with_a_hung_rank_fails_after_collective_timeout_s(policy_folder):
    """Rank 1 stops while its process would still be heard for minutes: rank 0's all-reduce gives up after
    trainer.collective_timeout_s, and the group names the rank that kept it waiting."""
    from rollart.actors import ActorDeadError
    from rollart.distributed import Cluster, ResourceManager
    from rollart.trainer import TrainerConfig
    from rollart.trainer.actor import TrainerActor
    from rollart.trainer.group import NOTICE_S, TrainerGroup
    from tests.trainer.tiny_policy import make_trajectories
    collective_timeout_s = 3.0
    cfg = TrainerConfig(model_path=policy_folder, num_threads=1, world_size=2, collective_timeout_s=collective_timeout_s)
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=LONG_HB, spawn_timeout=300) as system:
        rm = ResourceManager({"cpu": 2})
        group = TrainerGroup(lambda: Cluster(TrainerActor, rm, 2, name="trainer", placement=["cpu"] * 2,
                                             restart=RestartPolicy(max_restarts=0), worker_args=(cfg,),
                                             system=system, verbose=False), 2, max_restarts=0)
        await group.start()
        try:
            with stopped(group.pids[1]):
                error, took = await fails_within(group.send(TrainStep(make_trajectories(2, 2))),
                                                 collective_timeout_s + NOTICE_S)
        finally:
            await group.shutdown()
    line = one_line(error)
    assert isinstance(error, ActorDeadError) and took >= collective_timeout_s - 0.5
    assert "rank trainer-0 failed:" in line and "trainer rank 0: train step waited on rank 1" in line, line
    assert "no progress for 3 s (trainer.collective_timeout_s)" in line and "(no answer from trainer-1)" in line, line
