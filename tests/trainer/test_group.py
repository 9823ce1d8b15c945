"""Covers trainer.world_size=2 in a run: two real trainer-rank processes over gloo, each sent only its shard of a
batch, give the losses of one trainer on the whole batch, rank 0 serves the weight plane, and a killed rank restarts the group or ends the run in one
line with no rank left running."""
import asyncio
import dataclasses
import logging
import os
import re
import signal
from pathlib import Path

import pytest

from recipes.grpo_frozenlake import TASK
from rollart.pipeline import Coordinator
from rollart.pipeline.run_actors import start_actors
from rollart.pipeline.prepare import prepare_run
from rollart.pipeline.recovery import ActorLostError
from rollart.trainer.group import TrainerGroup
from rollart.trainer import make_trainer
from rollart.messages import PublishWeights, SaveCheckpoint, TrainStep, WeightAddress
from tests.pipeline.run_configs import recipe_config
from tiny_policy import make_trajectories

GROUP_RUN = ["actor_mode=inprocess", "trainer_actor_mode=process",  # only the trainer ranks are processes
             "checkpoint_every=1", "env_hosts=0", "trainer.num_threads=1"]
LOSSES = ("losses/policy", "losses/kl", "losses/entropy", "losses/grad_norm", "losses/total")


async def train_twice(cfg) -> tuple[list[dict], dict, list]:
    """Two train steps on fixed batches through the run's trainer handle; also its weight address and pids."""
    c = await start_actors(cfg)
    try:
        metrics = [await c.trainer.send(TrainStep(make_trajectories(3, 4, seed=s))) for s in (10, 11)]
        address = await c.trainer.send(WeightAddress())
        published = await c.trainer.send(PublishWeights(2, 1 << 20))
        return metrics, {"address": address.address, "published": published}, c.trainer.pids
    finally:
        await c.close()


def test_two_trainer_ranks_each_sent_its_shard_give_the_losses_of_one(tmp_path):
    cfg = prepare_run(recipe_config(tmp_path, *GROUP_RUN, "trainer.world_size=2", "trainer.num_minibatches=2",
                                       "trainer.kl_coef=0.05", "trainer.entropy_coef=0.01",
                                       "trainer.micro_batch_tokens=48")).config
    two, where, pids = asyncio.run(train_twice(cfg))
    single = make_trainer(dataclasses.replace(cfg.trainer, world_size=1))  # the run's trainer config, one process
    one = [single.train_step(make_trajectories(3, 4, seed=s)) for s in (10, 11)]
    assert len(set(pids)) == 2 and os.getpid() not in pids  # two rank processes
    for step in range(2):
        for key in LOSSES:  # all-reduce sums in another order: equal up to float32 rounding
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-4, abs=1e-6), (step, key)
        assert two[step]["charts/loss_tokens"] == one[step]["charts/loss_tokens"]
    assert two[1]["charts/version"] == 2
    assert where["published"].version == 2 and where["published"].address == where["address"]


def test_each_rank_is_sent_only_its_rows_and_what_keeps_the_loss_unsharded():
    group = TrainerGroup(lambda: None, world_size=2, max_restarts=0)
    trajs = make_trajectories(3, 4, seed=1)
    sent = [group.rank_message(r, TrainStep(trajs)) for r in range(2)]
    assert sent[0].trajectories == trajs[0::2] and sent[1].trajectories == trajs[1::2]
    info = sent[1].shard
    assert info["rows"] == [1, 3, 5, 7, 9, 11] and info["n_rows"] == 12
    assert info["rewards"] == [t.reward for t in trajs] and info["groups"] == [t.group_id for t in trajs]
    save = SaveCheckpoint("dir")
    assert group.rank_message(1, save) is save  # not a batch: as given
    assert group.rank_message(1, TrainStep(trajs[:1])) == TrainStep(trajs[:1])  # fewer rows than ranks


async def kill_rank_at_step(co: Coordinator, rank: int, step: int) -> int:
    run = asyncio.create_task(co.run())
    while getattr(co, "step", 0) < step and not run.done():
        await asyncio.sleep(0.05)  # waiting for a state, not timing anything
    pid = co.parts.actors.trainer.pids[rank]
    os.kill(pid, signal.SIGKILL)
    try:
        co.result = await run
    finally:
        co.stopped_pids = co.parts.actors.trainer.pids
    return pid


@pytest.mark.slow
def test_a_killed_rank_restarts_the_group_from_the_newest_checkpoint(tmp_path, caplog):
    co = Coordinator(recipe_config(tmp_path, *GROUP_RUN, "total_steps=4", "trainer.world_size=2"), [TASK])
    with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
        pid = asyncio.run(kill_rank_at_step(co, 1, 2))
    assert co.parts.actors.trainer.restarts == 1 and pid not in co.parts.actors.trainer.pids
    assert "trainer group: rank trainer-1 died" in caplog.text
    assert "is back from step_0000000" in caplog.text, caplog.text
    assert co.result.version == 4 and [h["step"] for h in co.result.history] == [1, 2, 3, 4]


def test_a_killed_rank_with_no_restart_left_ends_the_run_and_stops_every_rank(tmp_path):
    co = Coordinator(recipe_config(tmp_path, *GROUP_RUN, "total_steps=1000", "trainer.world_size=2",
                                   "trainer_restarts=0"), [TASK])
    with pytest.raises(ActorLostError) as e:
        asyncio.run(kill_rank_at_step(co, 1, 1))
    # whichever sees it first: the process's exit, or its connection dropping (a loaded machine, either order)
    assert re.match(r"actor trainer-group died: rank trainer-1 died: (process|no connection to the actor)",
                    str(e.value)), str(e.value)
    assert "\n" not in str(e.value)
    for pid in co.stopped_pids:  # rank 0 was stopped with the group, not left waiting in a collective
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
