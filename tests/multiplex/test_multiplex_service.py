"""TrainingService with real worker processes over ZeroMQ: two jobs interleaved on one deployment train
bit-identically to a private trainer, the per-deployment op order is serial (router log and the worker's
own in-flight count), forward/forward_backward/optim_step/materialize work across switches, and a failing
or vanished job leaves the service and the other job running; a job's SharedTrainerClient answers the trainer
messages the service serves, refuses the others with a TypeError, and reports the job's end as its death."""
import asyncio

import pytest
import torch

from rollart.messages import DeviceStats, GetVersion, TrainStep, WeightAddress, WeightBuckets
from rollart.multiplex.client import SharedTrainerClient
from rollart.multiplex.messages import Forward, ForwardBackward, Materialize, OpLog, OptimStep
from rollart.multiplex.router import check_serial
from rollart.multiplex.hrrs import JobClosedError, JobState
from rollart.multiplex.service import ServiceConfig, TrainingService
from rollart.trainer import make_trainer

from mx_fixtures import save_tiny_policy, trainer_config, trajectories


def _weights(buckets):
    return {n: t for names, tensors in buckets for n, t in zip(names, tensors)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return save_tiny_policy(root / "a", 0, tie=True), save_tiny_policy(root / "b", 1)


async def test_two_jobs_interleaved_match_private_training_bit_exactly(models, tmp_path):
    a, b = models
    private = make_trainer(trainer_config(a))
    for k in range(3):
        private.train_step(trajectories(seed=k))
    expected = dict(private.named_tensors())

    async with TrainingService(ServiceConfig(mode="process", spill_dir=str(tmp_path), offload_tier="disk")) as s:
        await s.register_job("A", trainer_config(a))
        await s.register_job("B", trainer_config(b))

        async def run(job, seed0):
            for k in range(3):
                await s.send(job, TrainStep(trajectories(seed=seed0 + k)))
        await asyncio.gather(run("A", 0), run("B", 10))
        assert await s.send("A", GetVersion()) == 3 and await s.send("B", GetVersion()) == 3
        got = _weights(await s.send("A", WeightBuckets(1 << 20)))
        assert set(got) == set(expected)
        for name, t in expected.items():
            assert torch.equal(got[name], t), name
        stats = (await s.worker_stats())["train0"][0]
        assert stats["max_in_flight"] == 1
        assert s.scheduler.stats()["switches"] >= 2
        check_serial(s.router.log["train0"])
        worker_log = await s.router.workers("train0")[0].send(OpLog())
        assert [e[0] for e in worker_log] == [r.seq for r in s.router.log["train0"]]  # same order both sides


async def test_narrow_api_and_failures_do_not_spread(models, tmp_path):
    a, b = models
    # the same actor runtime with the worker in this process (one process spawn per file is enough)
    async with TrainingService(ServiceConfig(mode="inprocess")) as s:
        await s.register_job("A", trainer_config(a))
        await s.register_job("B", trainer_config(b))
        # a job whose trainer cannot be built fails alone
        with pytest.raises(Exception, match="model"):
            await s.register_job("C", trainer_config(str(tmp_path / "missing")))
        # gradients accumulated by forward_backward survive a context switch
        await s.send("A", ForwardBackward(trajectories(num_groups=3, seed=5)))
        await s.send("B", TrainStep(trajectories(seed=6)))
        step = await s.send("A", OptimStep())
        assert step["losses/grad_norm"] > 0 and step["charts/version"] == 1.0
        lp = await s.send("B", Forward(trajectories(seed=7)))
        assert len(lp) == 8 and all((x <= 0).all() for x in lp)
        # B's bad request fails B's future only
        with pytest.raises(Exception):
            await s.send("B", TrainStep(["not a trajectory"]))
        with pytest.raises(TypeError, match="answers no WeightAddress message"):
            await s.send("B", WeightAddress())
        # the Coordinator's trainer: the service through a job's client
        client_a, client_b = SharedTrainerClient(s, "A"), SharedTrainerClient(s, "B")
        assert client_a.alive and not client_a.supervised and client_a.restarts == 0
        assert await client_a.send(GetVersion()) == 1
        assert (await client_a.send(DeviceStats()))["device"] in ("cpu", "cuda:0")
        with pytest.raises(TypeError, match="WeightAddress"):  # the weight sync falls back to WeightBuckets
            await client_a.send(WeightAddress())
        # B's controller vanishes with requests queued: they are dropped, A goes on
        pending = [asyncio.ensure_future(client_b.send(TrainStep(trajectories(seed=i)))) for i in range(3)]
        s.scheduler.close_job("B", JobState.FAILED, "controller crashed")
        results = await asyncio.gather(*pending, return_exceptions=True)
        assert any(isinstance(r, JobClosedError) for r in results)
        assert not client_b.alive and "FAILED: controller crashed" in client_b.dead_reason
        for k in range(2):
            m = await client_a.send(TrainStep(trajectories(seed=20 + k)))
        assert m["charts/version"] == 3.0
        # an offloaded job's checkpoint is materialised from managed state without a switch
        await s.register_job("D", trainer_config(b))  # makes D resident, A offloaded
        path = await s.send("A", Materialize(str(tmp_path / "a.safetensors")))
        assert (tmp_path / "a.safetensors").exists() and path.endswith("a.safetensors")
        assert s.scheduler.resident["train0"] == "D"
        await s.complete_job("A")
        assert s.job_state("A") == JobState.COMPLETED and not client_a.alive
        check_serial(s.router.log["train0"])
        assert (await s.worker_stats())["train0"][0]["max_in_flight"] == 1
