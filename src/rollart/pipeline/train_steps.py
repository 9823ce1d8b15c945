"""A train step and its accounting: the batch sent to the trainer; then the new version published, the step's
metrics logged and recorded, a periodic checkpoint taken. When the trainer dies, the run goes back to its
newest checkpoint (``Recovery.trainer_back``) and trains the lost steps again, so no accepted sample is lost."""
from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any, Awaitable, NamedTuple, Optional

from rollart.actors import ActorDeadError, RemoteError
from rollart.emulation import train_delay
from rollart.messages import TrainStep
from rollart.monitor import MetricsLogger, ProgressBar, trajectory_metrics
from rollart.pipeline.checkpointing import Checkpointer
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.parts import RunParts
from rollart.pipeline.run_state import RunState, TrainedBatch
from rollart.types import Trajectory
from rollart.versions import staleness_values, version_span

log = logging.getLogger("rollart.pipeline")


class TrainResult(NamedTuple):
    batch: list[Trajectory]
    """The batch as trained (in a fixed order)."""
    metrics: dict
    train_end: float
    """``time.perf_counter()`` when the trainer answered (the exposed part of a weight pull is what outlasts it)."""


class TrainSteps:
    def __init__(self, cfg: PipelineConfig, state: RunState, parts: RunParts, logger: MetricsLogger,
                 checkpointer: Checkpointer, bar: Optional[ProgressBar]):
        self.cfg, self.state, self.parts = cfg, state, parts
        self.logger, self.checkpointer, self.bar = logger, checkpointer, bar

    async def train(self, batch: list[Trajectory], extra: dict | None = None) -> TrainResult:
        t0 = time.perf_counter()
        st = self.state
        # in a fixed order, not the order trajectories finished in: float sums then repeat from run to run
        batch = sorted(batch, key=lambda t: (t.group_id, t.trajectory_id))
        # kept until a checkpoint covers it: a trainer that dies before then trains it again (replay); without
        # periodic checkpoints only the batch in flight is kept (memory stays bounded; earlier steps are lost)
        periodic = self.cfg.checkpoint_every or self.cfg.checkpoint_every_s
        kept = [b for b in st.uncheckpointed if b.step <= st.step] if periodic else []
        st.uncheckpointed = [*kept, TrainedBatch(st.step + 1, batch)]
        self.parts.recovery.check_trainer()  # a trainer restarted while idle holds the initial weights
        metrics = await (self._kv_released(batch) if self.cfg.release_kv_while_training else self._step(batch))
        return TrainResult(batch, {**(extra or {}), **metrics, "system/train_s": time.perf_counter() - t0},
                           time.perf_counter())

    async def _step(self, batch: list[Trajectory]) -> dict:
        """The trainer's step on ``batch``; with simulate_hardware it counts done once the emulated trainer would be
        (a shared trainer on emulated GPUs holds its device that long itself, and its answer says so)."""
        sent = time.perf_counter()
        metrics = await self.parts.actors.trainer.send(TrainStep(batch))
        speed = self.cfg.trainer_speed()
        if speed is not None and "system/train_emulated_s" not in metrics:
            delay, emulated = train_delay(speed, sum(len(t.token_ids) for t in batch), time.perf_counter() - sent)
            await asyncio.sleep(delay)
            metrics = {**metrics, **emulated}
        return metrics

    async def _kv_released(self, batch: list[Trajectory]) -> dict:
        """The step while every engine's KV cache is freed (mode=sync on one GPU: the trainer's gradients and
        activations take its place); the caches are allocated again, empty, whatever the step's outcome."""
        proxy = self.parts.actors.proxy
        t0 = time.perf_counter()
        freed = await proxy.release_kv()
        released = time.perf_counter()
        try:
            metrics = await self._step(batch)
        finally:
            t1 = time.perf_counter()
            await proxy.reclaim_kv()
        return {**metrics, "system/kv_released_bytes": float(freed), "system/kv_release_s": released - t0,
                "system/kv_reclaim_s": time.perf_counter() - t1}

    async def finish(self, result: TrainResult, extra: dict | None = None, background_push: bool = False) -> None:
        """Account a finished train step: new version published to the weight store, metrics logged. With
        ``background_push`` (the overlapped loop) the store's fetch of the version goes on behind the next train step;
        its time is logged with the step whose update installs it."""
        st, p, logger = self.state, self.parts, self.logger
        batch, metrics = result.batch, {**(extra or {}), **result.metrics}
        trained_at = p.weights.version
        st.step += 1
        p.scheduler.rows_trained(batch)
        await p.buffer.batch_trained()  # its groups no longer hold back new starts
        push = await p.recovery.publish(trained_at + 1, background_push)
        if not background_push:
            metrics["system/weight_push_s"] = push.push_s
        metrics.update(trajectory_metrics(batch, trained_at))
        metrics["rollout/version_span_max"] = float(max(version_span(t) for t in batch))
        counters = p.actors.proxy.counters  # cumulative: requests, retries, rerouted, fallbacks, spills, aborted
        metrics.update({f"rollout/routing/{k}": float(counters[k])
                        for k in ("requests", "retries", "rerouted", "fallbacks", "spills")
                        + (("pd_kv_tokens", "pd_kv_bytes", "pd_reprefill_tokens") if self.cfg.pd else ())})
        self._log_hw_affinity(metrics)
        p.heldout.maybe_start(st.step)  # in the background: nothing waits for it
        st.timings.extend(dict(t.timings) for t in batch)
        for key in ("env_reset", "env_step"):
            logger.histogram(f"system/{key}_s", [t.timings.get(key, 0.0) for t in batch], st.step)
        metrics["system/elapsed_s"] = st.elapsed()
        metrics["system/tokens_per_step"] = float(sum(len(t.token_ids) for t in batch))
        logger.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, st.step)
        logger.histogram("rollout/staleness", staleness_values(batch, trained_at), st.step)
        logger.log_counts("rollout/aborted", dict(p.buffer.aborted), st.step)
        logger.log_counts("rollout/evicted", dict(p.buffer.evicted), st.step)
        logger.log(await p.scoring.metrics(), st.step)
        if p.actions is not None:
            logger.log(p.actions.metrics(), st.step)
        st.history.append({"step": st.step, **metrics})
        if self.bar is not None:
            self.bar.update(st.step, reward=metrics.get("rollout/reward_mean", 0.0),
                            success=metrics.get("charts/success", 0.0))
        if self.checkpointer.due():
            await self.checkpointer.save()

    async def train_and_finish(self, batch: list[Trajectory], extra: dict | None = None) -> None:
        await self.finish(await self.train(batch, extra))

    async def update_now(self) -> None:
        """Steps ②–④ outside the overlapped loop (sync / oneoff / end of run)."""
        sync = await self.parts.recovery.update_now()
        if sync:
            self.logger.log(sync, self.state.step)
            self.state.history[-1].update(sync)

    async def trained(self, step: Awaitable[Any]) -> None:
        """Await ``step`` (a train step's accounting, or a weight update). If the trainer died meanwhile, the
        run goes back to its newest checkpoint and trains the lost steps again (``replay``), ending where
        ``step`` would have: the caller goes on either way."""
        recovery = self.parts.recovery
        try:
            await step
            return
        except (ActorDeadError, RemoteError) as e:
            if not recovery.is_trainer_loss(e):
                raise
            self.state.step, _ = await recovery.trainer_back(e)
        await self._replay()
        self.logger.log({f"system/{k}": float(v) for k, v in recovery.counters.items()}, self.state.step)

    async def _replay(self) -> None:
        """After the trainer went back to its newest checkpoint: train again, in order and at the versions they
        were trained at first, the batches it lost (those since the checkpoint, and the one in flight).
        Tensorboard drops what was logged past the checkpoint (no step twice)."""
        st, recovery = self.state, self.parts.recovery
        while True:
            st.history = [h for h in st.history if h["step"] <= st.step]
            self.logger.rewind(st.step)
            lost = [b.batch for b in st.uncheckpointed if b.step > st.step]
            if lost:
                log.warning("replaying %d train step(s) the trainer lost (%d trajectories)", len(lost),
                            sum(len(b) for b in lost))
            try:
                for batch in lost:
                    await self.train_and_finish(batch, {"system/replayed": 1.0})
                await self.update_now()  # the workers take the version the replay ended at
                recovery.counters["replayed_steps"] += len(lost)
                return
            except (ActorDeadError, RemoteError) as e:
                if not recovery.is_trainer_loss(e):
                    raise
                st.step, _ = await recovery.trainer_back(e)

    def _log_hw_affinity(self, metrics: dict) -> None:
        """The online profiler's costs as scalars; its mapping, when it changed, in one line and as text."""
        profiler = self.parts.actors.proxy.profiler
        if len(profiler.workers) < 2:
            return  # one hardware class: nothing to choose
        metrics.update(profiler.metrics())
        if profiler.changes != self.state.hw_affinity_changes:
            self.state.hw_affinity_changes = profiler.changes
            what = "hw_affinity=auto" if self.cfg.proxy.hw_affinity == "auto" else "hw_affinity proposal"
            self.logger.log_text("rollout/hw_affinity", f"{what}: {profiler.describe()}", self.state.step)
            if not self.cfg.quiet:
                print(f"\r{what} (step {self.state.step}): {profiler.describe()}", file=sys.stderr, flush=True)
