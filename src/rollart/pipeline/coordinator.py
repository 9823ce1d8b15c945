"""Coordinator: drives rollout, reward and training for one run (RollArt §6.2, Fig. 9).

Asynchronous modes (``async``, ``areal``) follow the six-step protocol every iteration::

       (the previous train step finished: version n+1 is published; the workers still run version n)
    ① batch = await buffer.get_batch(B)        blocks until B scored trajectories are buffered
    ② await proxy.suspend()                     no new generation admitted; in-flight requests keep going
    ③ await weights.update_workers()            every inference worker swaps to the newest version (n+1),
                                                which now gates the buffer
    ④ await proxy.resume()
    ⑤ (inside each engine)                      KV of in-flight requests recomputed under the new weights
    ⑥ train_step(batch)                         overlapped with the rollout that continues meanwhile

The asynchronous bound follows the paper's wording (§6.2): "if the current agent LLM is at version n, any
buffered trajectory must have been initiated by a version no older than n − α". The agent LLM is the
inference side, one version behind the trainer at ①, so with α=1 a trajectory survives one weight update
(it is preempted and resumed, ⑤) and is trained at most α+1 versions behind the trainer.

⑥ is launched right after ① (it needs only the batch) and the background pull of version n is finished
before ② (rollout keeps running meanwhile), so the suspension covers only the swap; the exposed pull is
the part of that wait that outlasts the train step beside it (RollArt §6.3, Table 4).

``sync`` (Sync+) collects a batch, trains, then updates; ``oneoff`` collects batch k+1 with the previous
weights while training on batch k. The same components serve every mode.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from rollart.actors.cpus import pinned
from rollart.monitor import MetricsLogger, ProgressBar, trajectory_metrics
from rollart.pipeline.components import Components, build
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.evaluate import evaluate
from rollart.pipeline.weights import WeightSync
from rollart.rollout.buffer import SampleBuffer
from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_manager import EnvManager, TaskSpec
from rollart.rollout.reward_dispatch import RewardDispatcher
from rollart.rollout.scheduler import RolloutScheduler
from rollart.types import Trajectory
from rollart.versions import staleness_values, version_span

log = logging.getLogger("rollart.pipeline")

RewardFn = Callable[[Trajectory], Awaitable[float]]


@dataclass
class RunResult:
    steps: int
    """Training steps completed in this run (after any resume)."""
    version: int
    """Final policy version."""
    final_success: dict[str, float]
    """Greedy evaluation success per task (and 'mean') with the final weights."""
    history: list[dict] = field(default_factory=list)
    """Per-step metrics."""
    evals: list[tuple[int, dict]] = field(default_factory=list)
    """(step, success per task) for every evaluation."""
    wall_s: float = 0.0
    run_dir: str = ""
    buffer: dict = field(default_factory=dict)
    """SampleBuffer counters at the end (accepted / trained / evicted by reason)."""
    timings: list[dict] = field(default_factory=list)
    """Per trained trajectory: seconds in env_reset, env_step, generate, reward and total."""
    workers: dict = field(default_factory=dict)
    """Inference worker name -> its stats at the end (hardware class, steps, engine_seconds, ...)."""


def ensure_model(cfg: PipelineConfig, run_dir: Path) -> str:
    """The model folder to train: cfg.model, or a tiny random-init model built once in the run folder."""
    if cfg.model:
        missing = [f for f in ("config.json", "tokenizer.json") if not (Path(cfg.model) / f).exists()]
        if missing:
            raise SystemExit(f"error: model={cfg.model!r} has no {' or '.join(missing)}; pass an HF-format model "
                             "folder with its tokenizer (python -m rollart.tools.make_tiny_model OUT builds one)")
        return cfg.model
    out = run_dir / "init_model"
    if not (out / "model.safetensors").exists():
        from rollart.tools.make_tiny_model import make_tiny_model
        make_tiny_model(out, seed=cfg.seed)
    return str(out)


def prepare_run(cfg: PipelineConfig) -> tuple[PipelineConfig, Any]:
    """The run's resolved config and its tokenizer: the model folder (a tiny one built in the run folder when
    ``cfg.model`` is empty) and its tokenizer's pad id filled in by ``cfg.resolve``."""
    from rollart.models import load_tokenizer
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    model = ensure_model(cfg, cfg.run_dir)
    tokenizer = load_tokenizer(model)
    return cfg.resolve(model=model, pad_id=tokenizer.pad_token_id or 0), tokenizer


class Coordinator:
    def __init__(self, cfg: PipelineConfig, tasks: list[TaskSpec], eval_tasks: list[TaskSpec] | None = None,
                 reward_fn: RewardFn | None = None, env_pool: EnvPool | None = None, trainer: Any = None):
        self.cfg = cfg
        self.tasks = tasks
        self.eval_tasks = eval_tasks if eval_tasks is not None else tasks
        cfg.preflight([*tasks, *self.eval_tasks], registered_envs=env_pool is None)  # fail before any process starts
        self.reward_fn = reward_fn
        self.env_pool = env_pool
        self.trainer = trainer
        """A trainer handle to use instead of a private trainer actor (e.g. a shared training service)."""
        self.run_dir = cfg.run_dir
        self.history: list[dict] = []
        self.evals: list[tuple[int, dict]] = []
        self.timings: list[dict[str, float]] = []
        self.step = 0
        self.worker_stats: dict = {}

    # ------------------------------------------------------------------ entry point
    async def run(self) -> RunResult:
        with pinned(self.cfg.rollout_cpus):  # this process is the rollout side (envs, scheduler, proxy)
            return await self._run()

    async def _run(self) -> RunResult:
        started = time.perf_counter()
        self.cfg, tokenizer = prepare_run(self.cfg)
        cfg = self.cfg  # resolved: what every component receives and config.json records
        self.logger = MetricsLogger(self.run_dir, config=cfg)
        self.c: Components = await build(cfg, self.trainer)
        try:
            self.buffer = SampleBuffer(cfg.buffer)
            pool = self.env_pool or EnvPool.inprocess()
            manager = EnvManager(self.c.proxy, tokenizer, pool, gate=self.buffer)
            self.eval_manager = EnvManager(self.c.proxy, tokenizer, pool, gate=None)
            self.scheduler = RolloutScheduler(self.tasks, manager, cfg.rollout, buffer=self.buffer,
                                              rewards=RewardDispatcher(self.reward_fn))
            self.weights = WeightSync(self.c.trainer, self.c.store, self.c.proxy, cfg.bucket_bytes,
                                      cfg.weight_link_bytes_per_s)
            await self._maybe_resume()
            self.bar = None if cfg.quiet else ProgressBar(cfg.total_steps)
            if cfg.eval_at_start and not self.evals:
                await self._evaluate()
            self.train_started = time.perf_counter()
            loop = {"async": self._run_overlapped, "areal": self._run_overlapped,
                    "sync": self._run_sync, "oneoff": self._run_oneoff}[cfg.mode]
            await loop()
            self.worker_stats = await self._worker_stats()
            await self._checkpoint(final=True)
            # the weights of this step were already evaluated (e.g. the stop-at-success check): reuse it
            fresh = self.evals and self.evals[-1][0] == self.step
            final = self.evals[-1][1] if fresh else await self._evaluate() if cfg.eval_at_end else {}
        finally:
            if getattr(self, "bar", None) is not None:
                self.bar.close()
            self.logger.close()
            await self.c.close()
        return RunResult(steps=len(self.history), version=self.weights.version, final_success=final,
                         history=self.history, evals=self.evals, timings=self.timings, wall_s=time.perf_counter() - started,
                         run_dir=str(self.run_dir), buffer=self.buffer.stats(), workers=self.worker_stats)

    # ------------------------------------------------------------------ the three loops
    async def _run_overlapped(self) -> None:
        """async / areal: rollout never stops; the six steps run every iteration."""
        rollout = asyncio.create_task(self.scheduler.run(), name="rollout")
        training: asyncio.Task | None = None
        try:
            while not self._done(in_flight=training is not None):
                if training is not None:  # publish the version it produced (installed at ③)
                    result = await self._unless_failed(training, rollout)
                    await self._finish_train(_exposed_pull(result, extra, pull))
                t0 = time.perf_counter()
                batch = await self._unless_failed(self.buffer.get_batch(self.cfg.batch_size), rollout)  # ①
                extra = {"system/get_batch_wait_s": time.perf_counter() - t0,
                         "rollout/window_start": float(self.buffer.window_start())}
                # the next batch forms with the agent one version on: free the slots of what it cannot take
                await self.buffer.retire_before_next(self.buffer.version + 1)
                # ⑥ needs only the batch, so it starts now; the rest of the background pull then hides
                # behind training and rollout (both keep running), and ② suspends only for the swap.
                training = asyncio.create_task(self._train(batch, {}))                               # ⑥
                pull = (time.perf_counter(), 0.0)
                await self._unless_failed(self.weights.prefetch(), rollout)
                pull = (pull[0], time.perf_counter())
                await self.c.proxy.suspend()                                                         # ②
                extra.update(await self.weights.update_workers())                                    # ③
                await self.buffer.set_version(self.weights.version)  # the agent LLM's version gates the window
                await self.c.proxy.resume()                                                          # ④ ⑤
                await self._maybe_evaluate(rollout)
            if training is not None:
                await self._finish_train(_exposed_pull(await training, extra, pull))
                await self._update_now()
        finally:
            rollout.cancel()
            if training is not None and not training.done():
                training.cancel()
            await asyncio.gather(rollout, *([training] if training is not None else []), return_exceptions=True)

    async def _run_sync(self) -> None:
        """Sync+: collect a batch (trajectory-level envs and rewards), train, update; rollout waits."""
        while not self._done():
            t0 = time.perf_counter()
            batch = _flatten(await self.scheduler.collect_batch(self.cfg.batch_groups))
            await self._finish_train(await self._train(batch, {"system/rollout_s": time.perf_counter() - t0}))
            await self._update_now()
            await self._maybe_evaluate()

    async def _run_oneoff(self) -> None:
        """One-off: rollout of the next batch (previous weights) overlaps training on this one."""
        batch = _flatten(await self.scheduler.collect_batch(self.cfg.batch_groups))
        while not self._done():
            training = asyncio.create_task(self._train(batch, {}))
            collecting = asyncio.create_task(self.scheduler.collect_batch(self.cfg.batch_groups))
            try:
                result = await training
            except BaseException:
                collecting.cancel()
                raise
            await self._finish_train(result)
            t0 = time.perf_counter()
            batch = _flatten(await collecting)
            self.logger.log({"system/get_batch_wait_s": time.perf_counter() - t0}, self.step)
            await self._update_now()
            await self._maybe_evaluate()

    # ------------------------------------------------------------------ steps
    async def _train(self, batch: list[Trajectory], extra: dict) -> tuple[list[Trajectory], dict]:
        t0 = time.perf_counter()
        # in a fixed order, not the order trajectories finished in: float sums then repeat from run to run
        batch = sorted(batch, key=lambda t: (t.group_id, t.trajectory_id))
        metrics = await self.c.trainer.call("train_step", batch)
        metrics = {**extra, **metrics, "system/train_s": time.perf_counter() - t0, "_train_end": time.perf_counter()}
        return batch, metrics

    async def _finish_train(self, result: tuple[list[Trajectory], dict]) -> None:
        """Account a finished train step: new version published to the weight store, metrics logged."""
        batch, metrics = result
        metrics.pop("_train_end", None)
        trained_at = self.weights.version
        self.step += 1
        push = await self.weights.publish(trained_at + 1)
        metrics["system/weight_push_s"] = push.push_s
        metrics.update(trajectory_metrics(batch, trained_at))
        metrics["rollout/version_span_max"] = float(max(version_span(t) for t in batch))
        counters = self.c.proxy.counters  # cumulative: requests, retries, rerouted, fallbacks, spills, aborted
        metrics.update({f"rollout/routing/{k}": float(counters[k])
                        for k in ("requests", "retries", "rerouted", "fallbacks", "spills")})
        self.timings.extend(dict(t.timings) for t in batch)
        for key in ("env_reset", "env_step"):
            self.logger.histogram(f"system/{key}_s", [t.timings.get(key, 0.0) for t in batch], self.step)
        elapsed = time.perf_counter() - self.train_started
        metrics["system/elapsed_s"] = elapsed
        tokens = sum(len(t.token_ids) for t in batch)
        metrics["system/tokens_per_step"] = float(tokens)
        self.logger.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, self.step)
        self.logger.histogram("rollout/staleness", staleness_values(batch, trained_at), self.step)
        self.logger.log_counts("rollout/aborted", dict(self.buffer.aborted), self.step)
        self.logger.log_counts("rollout/evicted", dict(self.buffer.evicted), self.step)
        self.history.append({"step": self.step, **metrics})
        if self.bar is not None:
            self.bar.update(self.step, reward=metrics.get("rollout/reward_mean", 0.0),
                            success=metrics.get("charts/success", 0.0))
        if self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0:
            await self._checkpoint()

    async def _update_now(self) -> None:
        """Steps ②–④ outside the overlapped loop (sync / oneoff / end of run)."""
        await self.c.proxy.suspend()
        sync = await self.weights.update_workers()
        await self.buffer.set_version(self.weights.version)
        await self.c.proxy.resume()
        if sync:
            self.logger.log(sync, self.step)
            self.history[-1].update(sync)

    def _done(self, in_flight: bool = False) -> bool:
        cfg = self.cfg
        if self.step + in_flight >= cfg.total_steps:
            return True
        if cfg.time_limit_s and time.perf_counter() - self.train_started > cfg.time_limit_s:
            log.warning("time limit %.0f s reached after %d steps", cfg.time_limit_s, self.step)
            return True
        return self._target_held()

    def _target_held(self) -> bool:
        """stop_at_success met on every task by each of the last ``stop_consecutive`` evaluations."""
        cfg = self.cfg
        recent = self.evals[-cfg.stop_consecutive:]
        if cfg.stop_at_success is None or len(recent) < cfg.stop_consecutive:
            return False
        return all(v >= cfg.stop_at_success for _, success in recent for k, v in success.items() if k != "mean")

    async def _worker_stats(self) -> dict:
        """Each inference worker's counters; with simulated hardware, warn if the real compute was not
        well below the simulated time (then the CPU, not the simulated class, set the worker's speed)."""
        stats = {}
        for name, hw, handle in self.c.workers:
            try:
                stats[name] = {"hw_class": hw, **await handle.call("get_stats")}
            except Exception as e:  # noqa: BLE001 - stats are diagnostics; a dead worker must not fail the run
                log.warning("stats of worker %s: %s", name, e)
        for name, st in stats.items():
            simulated = st.get("simulated_scaled_seconds", 0.0)
            if self.cfg.simulate_hardware and simulated and st["engine_seconds"] > 0.5 * simulated:
                log.warning("worker %s: real engine compute %.1f s is %.0f%% of its simulated %s time %.1f s, "
                            "so this CPU, not the simulated hardware, set much of its speed; raise "
                            "sim_time_scale or give rollout more cores", name, st["engine_seconds"],
                            100 * st["engine_seconds"] / simulated, st["hw_class"], simulated)
        return stats

    # ------------------------------------------------------------------ evaluation and checkpoints
    async def _maybe_evaluate(self, rollout: asyncio.Task | None = None) -> None:
        every = self.cfg.eval_every
        if every and self.step and self.step % every == 0 and (not self.evals or self.evals[-1][0] != self.step):
            coro = self._evaluate()
            await (self._unless_failed(coro, rollout) if rollout is not None else coro)

    async def _evaluate(self) -> dict[str, float]:
        success = await evaluate(self.eval_manager, self.eval_tasks, self.cfg.eval_episodes, seed=10_000)
        self.evals.append((self.step, success))
        self.logger.log({f"charts/eval_success/{k}": v for k, v in success.items()}, self.step)
        self.logger.flush()
        return success

    async def _checkpoint(self, final: bool = False) -> None:
        if not self.step or (final and self.history and self.history[-1].get("checkpoint")):
            return
        extra = {"step": self.step, "version": self.weights.version, "buffer": self.buffer.stats(),
                 "evals": self.evals[-1:] if self.evals else []}
        path = await self.c.trainer.call("save_checkpoint", str(self.run_dir / "checkpoints"), extra)
        if self.history:
            self.history[-1]["checkpoint"] = path

    async def _maybe_resume(self) -> None:
        from rollart.trainer.checkpoint import latest
        root = self.run_dir / "checkpoints"
        found = latest(root)
        if not self.cfg.resume:
            if found is not None:  # a re-run in the same folder: its curves land beside the earlier run's
                log.warning("%s holds an earlier run's checkpoint (%s); starting fresh in the same folder: pass "
                            "--resume to continue it, or run_name=NEW for a separate run", self.run_dir, found.name)
            return
        if found is None:
            log.warning("resume: no checkpoint under %s; starting fresh", root)
            return
        extra = await self.c.trainer.call("load_checkpoint", str(found))
        version = await self.c.trainer.call("get_version")
        self.step = int(extra.get("step", version))
        await self.weights.publish(version)
        await self._update_now_quiet()
        self.scheduler.reseed(self.cfg.seed + self.step)  # new task draws after a resume
        log.warning("resumed from %s at step %d, version %d", found, self.step, version)

    async def _update_now_quiet(self) -> None:
        await self.weights.update_workers()
        await self.buffer.set_version(self.weights.version)

    @staticmethod
    async def _unless_failed(coro: Awaitable[Any], background: asyncio.Task) -> Any:
        """Await ``coro`` but raise at once if ``background`` (the rollout) died meanwhile."""
        task = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({task, background}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        background.result()  # raises the rollout's error
        raise RuntimeError("rollout stopped unexpectedly")


def _exposed_pull(result: tuple[list[Trajectory], dict], extra: dict,
                  pull: tuple[float, float]) -> tuple[list[Trajectory], dict]:
    """Overlapped modes: fold in ``extra`` (get_batch wait and weight-sync metrics, filled while training
    ran) and count as *exposed* only the part of the pull wait ``pull=(start, end)`` that outlasted the
    train step running beside it — rollout was never suspended for it, so only that part delays the run."""
    batch, metrics = result
    metrics = {**extra, **metrics}
    if "system/weight_pull_accum_s" in metrics:
        start, end = pull
        metrics["system/weight_pull_exposed_s"] = max(0.0, end - max(start, metrics["_train_end"]))
    return batch, metrics


def _flatten(groups: list[list[Trajectory]]) -> list[Trajectory]:
    return [t for g in groups for t in g]
