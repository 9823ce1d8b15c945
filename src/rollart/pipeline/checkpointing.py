"""A run's checkpoints: taken every ``checkpoint_every`` steps (or seconds) and at the end, resumed from with
``--resume``, and gone back to when the trainer dies, the steps it lost trained again. Mixed into ``Coordinator``,
whose state it uses."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Awaitable

from rollart.actors import ActorDeadError, RemoteError
from rollart.monitor import MetricsLogger
from rollart.pipeline.resume import counters_snapshot, restore_counters

log = logging.getLogger("rollart.pipeline")


class Checkpointing:
    async def _checkpoint(self, final: bool = False) -> None:
        if not self.step or (final and self.history and self.history[-1].get("checkpoint")):
            return
        extra = {"step": self.step, "version": self.weights.version, "buffer": self.buffer.stats(),
                 "evals": self.evals[-1:] if self.evals else [],
                 "counters": counters_snapshot(self.buffer, self.c.proxy.counters, self._elapsed())}
        path = await self.c.trainer.call("save_checkpoint", str(self.run_dir / "checkpoints"), extra,
                                         self.cfg.keep_checkpoints)
        self.checkpointed_at = time.perf_counter()
        self.replay = [(s, b) for s, b in self.replay if s > self.step]
        if self.history:
            self.history[-1]["checkpoint"] = path

    async def _maybe_resume(self) -> bool:
        """Continue from the newest intact checkpoint when ``cfg.resume``; True if it did."""
        from rollart.trainer.checkpoint import candidates
        root = self.run_dir / "checkpoints"
        found = candidates(root)
        if not self.cfg.resume:
            if found:  # a re-run in the same folder: its curves land beside the earlier run's
                log.warning("%s holds an earlier run's checkpoint (%s); starting fresh in the same folder: pass "
                            "--resume to continue it, or run_name=NEW for a separate run", self.run_dir, found[0].name)
            return False
        if not found:
            log.warning("resume: no checkpoint under %s; starting fresh", root)
            return False
        folder, extra = await self._load_newest_intact(root, found)
        version = await self.c.trainer.call("get_version")
        self.step = int(extra.get("step", version))
        await self.recovery.publish(version)
        await self._update_now_quiet()
        self.scheduler.reseed(self.cfg.seed + self.step)  # new task draws after a resume
        self.elapsed_before = restore_counters(extra.get("counters", {}), self.buffer, self.c.proxy.counters)
        log.warning("resumed from %s at step %d, version %d", folder, self.step, version)
        return True

    async def _load_newest_intact(self, root: Path, found: list[Path]) -> tuple[Path, dict]:
        """Load the newest checkpoint the trainer can verify and load; each one skipped is one warning line."""
        from rollart.trainer.checkpoint import CheckpointError
        for i, folder in enumerate(found):
            try:
                return folder, await self.c.trainer.call("load_checkpoint", str(folder))
            except (RemoteError, CheckpointError) as e:
                if isinstance(e, RemoteError) and not e.matches(CheckpointError):
                    raise
                problem = e.message if isinstance(e, RemoteError) else str(e)
                older = f"falling back to {found[i + 1].name}" if i + 1 < len(found) else "no older checkpoint"
                log.warning("resume: %s; %s", problem, older)
        raise CheckpointError(f"--resume: none of the {len(found)} checkpoint(s) in {root} is intact (see the "
                              "warnings above); start without --resume, or with run_name=NEW for a separate run")

    async def _update_now_quiet(self) -> None:
        await self.weights.update_workers()
        await self.buffer.set_version(self.weights.version)

    async def _trained(self, step: Awaitable[Any]) -> None:
        """Await ``step`` (a train step's accounting, or a weight update). If the trainer died meanwhile, the
        run goes back to its newest checkpoint (``Recovery.trainer_back``) and trains the lost steps again
        (``_replay``), ending where ``step`` would have: the caller goes on either way."""
        try:
            await step
            return
        except (ActorDeadError, RemoteError) as e:
            if not self.recovery.is_trainer_loss(e):
                raise
            self.step, version = await self.recovery.trainer_back(e)
        await self._replay()
        self.logger.log({f"system/{k}": float(v) for k, v in self.recovery.counters.items()}, self.step)

    async def _replay(self) -> None:
        """After the trainer went back to its newest checkpoint: train again, in order and at the versions they
        were trained at first, the batches it lost (those since the checkpoint, and the one in flight), so no
        accepted sample is lost. Tensorboard drops what was logged past the checkpoint (no step twice)."""
        while True:
            self.history = [h for h in self.history if h["step"] <= self.step]
            self.logger.close()
            self.logger = MetricsLogger(self.run_dir, purge_step=self.step + 1)
            lost = [batch for step, batch in self.replay if step > self.step]
            if lost:
                log.warning("replaying %d train step(s) the trainer lost (%d trajectories)", len(lost),
                            sum(len(b) for b in lost))
            try:
                for batch in lost:
                    await self._train_and_finish(batch, {"system/replayed": 1.0})
                await self._update_now()  # the workers take the version the replay ended at
                self.recovery.counters["replayed_steps"] += len(lost)
                return
            except (ActorDeadError, RemoteError) as e:
                if not self.recovery.is_trainer_loss(e):
                    raise
                self.step, _ = await self.recovery.trainer_back(e)
