"""Covers a checkpoint the trainer cannot write (the disk is full): training goes on with one warning, the batches
since the last checkpoint are kept for a replay, and only the run's last checkpoint failing ends the run."""
import logging
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from rollart.actors import LocalHandle, RemoteError, handles
from rollart.messages import SaveCheckpoint
from rollart.pipeline.checkpointing import Checkpointer
from rollart.pipeline.run_state import RunState, TrainedBatch
from rollart.rollout.buffer import BufferConfig, SampleBuffer
from rollart.trainer.checkpoint import CheckpointWriteError

FULL = ("checkpoint step_00000004 not written in /x/checkpoints: OSError: [Errno 28] No space left on device "
        "(0.2 MiB were free there when it failed); its partial folder was removed; the newest complete checkpoint "
        "is step_00000002")


class FullDiskTrainer:
    def __init__(self, error: Exception):
        self.error = error
        self.saves = 0

    @handles(SaveCheckpoint)
    def save_checkpoint(self, msg: SaveCheckpoint) -> str:
        self.saves += 1
        if self.error is not None:
            raise self.error
        return f"{msg.root}/step_00000004"


def checkpointer(tmp_path: Path, error: Exception | None) -> tuple[Checkpointer, RunState, FullDiskTrainer]:
    trainer = FullDiskTrainer(error)
    parts = NS(weights=NS(version=4), buffer=SampleBuffer(BufferConfig(group_size=2, capacity=8), version=4),
               scheduler=NS(rows_state=lambda: {}), actors=NS(proxy=NS(counters={}), trainer=LocalHandle(trainer)))
    cfg = NS(run_dir=tmp_path, keep_checkpoints=2, checkpoint_every=2, checkpoint_every_s=0.0)
    state = RunState(step=4, history=[{"step": 4}], uncheckpointed=[TrainedBatch(3, []), TrainedBatch(4, [])])
    return Checkpointer(cfg, state, parts), state, trainer


WRITE_ERROR = "rollart.trainer.checkpoint.CheckpointWriteError"


@pytest.mark.parametrize("where", ["inprocess", "process"])
async def test_a_checkpoint_the_disk_cannot_take_is_one_warning_and_training_goes_on(tmp_path, caplog, where):
    error = CheckpointWriteError(FULL) if where == "inprocess" else RemoteError(
        "trainer-0", "SaveCheckpoint", WRITE_ERROR, FULL, mro_names=(WRITE_ERROR, "builtins.RuntimeError"))
    ck, state, trainer = checkpointer(tmp_path, error)
    with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
        await ck.save()
    assert trainer.saves == 1 and state.history[-1]["checkpoint_failed"] == FULL
    assert "checkpoint" not in state.history[-1]
    assert [b.step for b in state.uncheckpointed] == [3, 4]  # still needed: the newest checkpoint is step 2
    assert [r.getMessage() for r in caplog.records] == [
        f"{FULL}; training goes on, the next checkpoint is tried when due"]


async def test_the_runs_last_checkpoint_must_be_written(tmp_path):
    ck, state, _ = checkpointer(tmp_path, CheckpointWriteError(FULL))
    with pytest.raises(CheckpointWriteError, match=r"^the run's last checkpoint: checkpoint step_00000004 not "
                       r"written .* free space under .*checkpoints, then continue from that checkpoint with --resume"):
        await ck.save(final=True)


async def test_a_trainer_that_fails_otherwise_still_stops_the_run(tmp_path):
    remote = RemoteError("trainer-0", "SaveCheckpoint", "builtins.ValueError", "a bug", mro_names=(
        "builtins.ValueError", "builtins.Exception"))
    ck, state, _ = checkpointer(tmp_path, remote)
    with pytest.raises(RemoteError, match="a bug"):
        await ck.save()
    ck, state, _ = checkpointer(tmp_path, None)
    await ck.save()
    assert state.history[-1]["checkpoint"].endswith("step_00000004") and state.uncheckpointed == []
