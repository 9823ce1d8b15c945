"""A worker process of one deployment is killed: that deployment's job fails with a clear error, the
service keeps serving the other deployment's job, and no request hangs."""
import asyncio
import os
import signal

import pytest

from rollart.messages import TrainStep
from rollart.multiplex.hrrs import JobState
from rollart.multiplex.service import ServiceConfig, TrainingService

from mx_fixtures import save_tiny_policy, trainer_config, trajectories


async def test_killed_worker_fails_only_its_jobs(tmp_path):
    a, b = save_tiny_policy(tmp_path / "a", 0), save_tiny_policy(tmp_path / "b", 1)
    async with TrainingService(ServiceConfig(deployments=2, mode="process")) as s:
        assert await s.register_job("A", trainer_config(a), deployment="train0") == "train0"
        assert await s.register_job("B", trainer_config(b), deployment="train1") == "train1"
        await asyncio.gather(s.send("A", TrainStep(trajectories(seed=0))),
                             s.send("B", TrainStep(trajectories(seed=1))))
        victim = s.router.workers("train1")[0]
        os.kill(victim.pid, signal.SIGKILL)  # the worker process this test's service started
        with pytest.raises(Exception) as err:
            async with asyncio.timeout(120):
                while True:  # the death is noticed on the next call or by the heartbeat monitor
                    await s.send("B", TrainStep(trajectories(seed=2)))
        assert "dead" in str(err.value) or "FAILED" in str(err.value), err.value
        assert s.job_state("B") == JobState.FAILED
        for k in range(2):
            m = await s.send("A", TrainStep(trajectories(seed=10 + k)))
        assert m["charts/version"] == 3.0 and s.job_state("A") == JobState.RUNNING
