"""A train step and its accounting: the batch sent to the trainer, then the new version published, the step's
metrics logged and recorded, and a periodic checkpoint taken. Mixed into ``Coordinator``, whose state it uses."""
from __future__ import annotations

import sys
import time

from rollart.monitor import trajectory_metrics
from rollart.types import Trajectory
from rollart.versions import staleness_values, version_span


class StepAccounting:
    async def _train(self, batch: list[Trajectory], extra: dict) -> tuple[list[Trajectory], dict]:
        t0 = time.perf_counter()
        # in a fixed order, not the order trajectories finished in: float sums then repeat from run to run
        batch = sorted(batch, key=lambda t: (t.group_id, t.trajectory_id))
        # kept until a checkpoint covers it: a trainer that dies before then trains it again (_replay); without
        # periodic checkpoints only the batch in flight is kept (memory stays bounded; earlier steps are lost)
        periodic = self.cfg.checkpoint_every or self.cfg.checkpoint_every_s
        kept = [(s, b) for s, b in self.replay if s <= self.step] if periodic else []
        self.replay = [*kept, (self.step + 1, batch)]
        self.recovery.check_trainer()  # a trainer restarted while idle holds the initial weights
        metrics = await self.c.trainer.call("train_step", batch)
        metrics = {**extra, **metrics, "system/train_s": time.perf_counter() - t0, "_train_end": time.perf_counter()}
        return batch, metrics

    async def _finish_train(self, result: tuple[list[Trajectory], dict]) -> None:
        """Account a finished train step: new version published to the weight store, metrics logged."""
        batch, metrics = result
        metrics.pop("_train_end", None)
        trained_at = self.weights.version
        self.step += 1
        push = await self.recovery.publish(trained_at + 1)
        metrics["system/weight_push_s"] = push.push_s
        metrics.update(trajectory_metrics(batch, trained_at))
        metrics["rollout/version_span_max"] = float(max(version_span(t) for t in batch))
        counters = self.c.proxy.counters  # cumulative: requests, retries, rerouted, fallbacks, spills, aborted
        metrics.update({f"rollout/routing/{k}": float(counters[k])
                        for k in ("requests", "retries", "rerouted", "fallbacks", "spills")
                        + (("pd_kv_tokens", "pd_kv_bytes", "pd_reprefill_tokens") if self.cfg.pd else ())})
        self._log_hw_affinity(metrics)
        self.heldout.maybe_start(self.step)  # in the background: nothing waits for it
        self.timings.extend(dict(t.timings) for t in batch)
        for key in ("env_reset", "env_step"):
            self.logger.histogram(f"system/{key}_s", [t.timings.get(key, 0.0) for t in batch], self.step)
        metrics["system/elapsed_s"] = self._elapsed()
        tokens = sum(len(t.token_ids) for t in batch)
        metrics["system/tokens_per_step"] = float(tokens)
        self.logger.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, self.step)
        self.logger.histogram("rollout/staleness", staleness_values(batch, trained_at), self.step)
        self.logger.log_counts("rollout/aborted", dict(self.buffer.aborted), self.step)
        self.logger.log_counts("rollout/evicted", dict(self.buffer.evicted), self.step)
        self.logger.log(await self.scoring.metrics(), self.step)
        if self.actions is not None:
            self.logger.log(self.actions.metrics(), self.step)
        self.history.append({"step": self.step, **metrics})
        if self.bar is not None:
            self.bar.update(self.step, reward=metrics.get("rollout/reward_mean", 0.0),
                            success=metrics.get("charts/success", 0.0))
        every, every_s = self.cfg.checkpoint_every, self.cfg.checkpoint_every_s
        if (every and self.step % every == 0) or (every_s and time.perf_counter() - self.checkpointed_at >= every_s):
            await self._checkpoint()

    async def _train_and_finish(self, batch: list[Trajectory], extra: dict) -> None:
        await self._finish_train(await self._train(batch, extra))

    def _log_hw_affinity(self, metrics: dict) -> None:
        """The online profiler's costs as scalars; its mapping, when it changed, in one line and as text."""
        profiler = self.c.proxy.profiler
        if len(profiler.workers) < 2:
            return  # one hardware class: nothing to choose
        metrics.update(profiler.metrics())
        if profiler.changes != getattr(self, "hw_affinity_changes", 0):
            self.hw_affinity_changes = profiler.changes
            what = "hw_affinity=auto" if self.cfg.proxy.hw_affinity == "auto" else "hw_affinity proposal"
            self.logger.log_text("rollout/hw_affinity", f"{what}: {profiler.describe()}", self.step)
            if not self.cfg.quiet:
                print(f"\r{what} (step {self.step}): {profiler.describe()}", file=sys.stderr, flush=True)

    def _elapsed(self) -> float:
        """Training seconds so far, across resumes."""
        return self.elapsed_before + time.perf_counter() - self.train_started

    async def _update_now(self) -> None:
        """Steps ②–④ outside the overlapped loop (sync / oneoff / end of run)."""
        sync = await self.recovery.update_now()
        if sync:
            self.logger.log(sync, self.step)
            self.history[-1].update(sync)
