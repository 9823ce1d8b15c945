"""A run's checkpoints: taken every ``checkpoint_every`` steps (or seconds) and at the end, and resumed from with
``--resume``. A checkpoint carries, besides the trainer's state, the sample buffer's and the proxy's cumulative
counters and the training time so far, so a resumed run reports as if it had never stopped, and where each dataset
task's row order stands, so a resumed run deals the rows not trained yet first (none skipped, none twice).

A checkpoint the trainer cannot write (the disk is full) is one warning line, and training goes on: the newest
complete checkpoint stays the one before, the batches trained since it are kept for a replay, and the next
checkpoint is tried when due. Only the run's last checkpoint must be written: if it cannot be, the run ends with
one line naming the folder and the checkpoint to resume from."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from rollart.actors import RemoteError
from rollart.messages import GetVersion, LoadCheckpoint, SaveCheckpoint
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.parts import RunParts
from rollart.pipeline.run_state import RunState
from rollart.rollout.buffer import SampleBuffer

log = logging.getLogger("rollart.pipeline")


class Checkpointer:
    def __init__(self, cfg: PipelineConfig, state: RunState, parts: RunParts):
        self.cfg, self.state, self.parts = cfg, state, parts
        self.root = cfg.run_dir / "checkpoints"

    def due(self) -> bool:
        every, every_s = self.cfg.checkpoint_every, self.cfg.checkpoint_every_s
        return bool((every and self.state.step % every == 0)
                    or (every_s and time.perf_counter() - self.state.checkpointed_at >= every_s))

    async def save(self, final: bool = False) -> None:
        st, p = self.state, self.parts
        if not st.step or (final and st.history and st.history[-1].get("checkpoint")):
            return
        extra = {"step": st.step, "version": p.weights.version, "buffer": p.buffer.stats(),
                 "evals": [list(e) for e in st.evals[-1:]],  # for the record: a resumed run evaluates afresh
                 "rows": p.scheduler.rows_state(),  # dataset rows: where each task's order stands
                 "counters": counters_snapshot(p.buffer, p.actors.proxy.counters, st.elapsed())}
        from rollart.trainer.checkpoint import CheckpointWriteError
        try:
            path = await p.actors.trainer.send(SaveCheckpoint(str(self.root), extra, self.cfg.keep_checkpoints))
        except (RemoteError, CheckpointWriteError) as e:
            if isinstance(e, RemoteError) and not e.matches(CheckpointWriteError):
                raise
            self._not_written(e.message if isinstance(e, RemoteError) else str(e), final)
            return
        st.checkpointed_at = time.perf_counter()
        st.uncheckpointed = [b for b in st.uncheckpointed if b.step > st.step]
        if st.history:
            st.history[-1]["checkpoint"] = path

    def _not_written(self, problem: str, final: bool) -> None:
        """Training goes on without this checkpoint (one warning line); a run cannot end without its last one."""
        from rollart.trainer.checkpoint import CheckpointWriteError
        st = self.state
        if st.history:
            st.history[-1]["checkpoint_failed"] = problem
        if final:
            raise CheckpointWriteError(f"the run's last checkpoint: {problem}; free space under {self.root}, then "
                                       "continue from that checkpoint with --resume")
        st.checkpointed_at = time.perf_counter()  # by time: tried again after the interval, not at every step
        log.warning("%s; training goes on, the next checkpoint is tried when due", problem)

    async def resume(self) -> bool:
        """Continue from the newest intact checkpoint when ``cfg.resume``; True if it did."""
        from rollart.trainer.checkpoint import candidates
        found = candidates(self.root)
        if not self.cfg.resume:
            if found:  # a re-run in the same folder: its curves land beside the earlier run's
                log.warning("%s holds an earlier run's checkpoint (%s); starting fresh in the same folder: pass "
                            "--resume to continue it, or run_name=NEW for a separate run", self.cfg.run_dir,
                            found[0].name)
            return False
        if not found:
            log.warning("resume: no checkpoint under %s; starting fresh", self.root)
            return False
        p = self.parts
        folder, extra = await self._load_newest_intact(found)
        version = await p.actors.trainer.send(GetVersion())
        self.state.step = int(extra.get("step", version))
        await p.recovery.publish(version)
        await p.weights.update_workers()
        await p.buffer.set_version(p.weights.version)
        p.scheduler.reseed(self.cfg.seed + self.state.step)  # new task draws after a resume
        p.scheduler.restore_rows(extra.get("rows", {}))  # dataset rows not trained yet are dealt first
        self.state.elapsed_before = restore_counters(extra.get("counters", {}), p.buffer, p.actors.proxy.counters)
        log.warning("resumed from %s at step %d, version %d", folder, self.state.step, version)
        return True

    async def _load_newest_intact(self, found: list[Path]) -> tuple[Path, dict]:
        """Load the newest checkpoint the trainer can verify and load; each one skipped is one warning line."""
        from rollart.trainer.checkpoint import CheckpointError
        for i, folder in enumerate(found):
            try:
                return folder, await self.parts.actors.trainer.send(LoadCheckpoint(str(folder)))
            except (RemoteError, CheckpointError) as e:
                if isinstance(e, RemoteError) and not e.matches(CheckpointError):
                    raise
                problem = e.message if isinstance(e, RemoteError) else str(e)
                older = f"falling back to {found[i + 1].name}" if i + 1 < len(found) else "no older checkpoint"
                log.warning("resume: %s; %s", problem, older)
        raise CheckpointError(f"--resume: none of the {len(found)} checkpoint(s) in {self.root} is intact (see the "
                              "warnings above); start without --resume, or with run_name=NEW for a separate run")


def counters_snapshot(buffer: SampleBuffer, routing: dict[str, int], elapsed_s: float) -> dict[str, Any]:
    """The cumulative counters to store in a checkpoint's ``extra``."""
    return {"buffer": dict(buffer.counters), "evicted": dict(buffer.evicted), "aborted": dict(buffer.aborted),
            "buffered": buffer.buffered, "max_buffered": buffer.max_buffered, "routing": dict(routing),
            "elapsed_s": elapsed_s}


def restore_counters(snapshot: dict[str, Any], buffer: SampleBuffer, routing: dict[str, int]) -> float:
    """Add a checkpoint's counters to a fresh run's; returns the training seconds before the checkpoint.

    Trajectories that sat in the buffer when the checkpoint was taken did not survive the restart: they count
    as evicted for reason ``resume``, so accepted = trained + evicted + buffered still holds.
    """
    if not snapshot:  # a checkpoint written before counters were saved
        return 0.0
    buffer.counters.update(snapshot.get("buffer", {}))
    buffer.evicted.update(snapshot.get("evicted", {}))
    buffer.aborted.update(snapshot.get("aborted", {}))
    if snapshot.get("buffered"):
        buffer.evicted["resume"] += int(snapshot["buffered"])
    buffer.max_buffered = max(buffer.max_buffered, int(snapshot.get("max_buffered", 0)))
    for key, value in snapshot.get("routing", {}).items():  # the proxy's router shares this dict: update in place
        routing[key] = routing.get(key, 0) + value
    return float(snapshot.get("elapsed_s", 0.0))
