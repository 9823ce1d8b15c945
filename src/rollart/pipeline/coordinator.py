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
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from rollart.actors import ActorDeadError, RemoteError
from rollart.actors.cpus import pinned
from rollart.monitor import MetricsLogger, ProgressBar, trajectory_metrics
from rollart.gateway.agent_task import AgentRunner, TaskRunner, start_gateway
from rollart.pipeline.components import Components, build
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.evaluate import evaluate
from rollart.pipeline.heldout import HeldOutEval, check_disjoint
from rollart.pipeline.recovery import Recovery
from rollart.pipeline.resume import counters_snapshot, restore_counters
from rollart.pipeline.scoring import Scoring, check_scoring, run_actions
from rollart.pipeline.weights import WeightSync
from rollart.rollout.buffer import SampleBuffer
from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_manager import EnvManager, TaskSpec
from rollart.rollout.scheduler import RolloutError, RolloutScheduler
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
    devices: dict = field(default_factory=dict)
    """Actor name -> its device and, on a GPU, peak memory in GiB ("peak_memory_gb") at the end of the run."""


def ensure_model(cfg: PipelineConfig) -> str:
    """The model folder to train: cfg.model (checked), or a tiny random-init model built once in the run folder."""
    if cfg.model:
        cfg.check_model()
        return cfg.model
    out = cfg.tiny_model_dir()
    if not (out / "model.safetensors").exists():
        from rollart.tools.make_tiny_model import make_tiny_model
        make_tiny_model(out, seed=cfg.seed)
    return str(out)


def prepare_run(cfg: PipelineConfig) -> tuple[PipelineConfig, Any]:
    """The run's resolved config and its tokenizer: the model folder (a tiny one built in the run folder when
    ``cfg.model`` is empty) and its tokenizer's pad id filled in by ``cfg.resolve``. The run folder is made
    only once the config has passed its checks."""
    from rollart.models import load_tokenizer
    cfg.check_model()
    cfg.check_derived(cfg.resolve(model=cfg.model or str(cfg.tiny_model_dir()), pad_id=cfg.trainer.pad_id))
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    model = ensure_model(cfg)
    tokenizer = load_tokenizer(model)
    resolved = cfg.resolve(model=model, pad_id=tokenizer.pad_token_id or 0)
    cfg.check_derived(resolved)  # trainer.pad_id, now that the tokenizer is known
    return resolved, tokenizer


class Coordinator:
    def __init__(self, cfg: PipelineConfig, tasks: list[TaskSpec], eval_tasks: list[TaskSpec] | None = None,
                 reward_fn: RewardFn | None = None, env_pool: EnvPool | None = None, trainer: Any = None,
                 heldout_tasks: list[TaskSpec] | None = None, inference: list | None = None):
        self.cfg = cfg
        self.tasks = tasks
        self.eval_tasks = eval_tasks if eval_tasks is not None else tasks
        self.heldout_tasks = list(heldout_tasks or []) if cfg.heldout_episodes else []
        """Held-out tasks (cfg.heldout_episodes each, every eval_every steps, in the background): see heldout."""
        check_disjoint(tasks, self.heldout_tasks)
        cfg.preflight([*tasks, *self.eval_tasks, *self.heldout_tasks], registered_envs=env_pool is None)
        check_scoring(cfg, reward_fn, tasks)
        self.reward_fn = reward_fn
        self.env_pool = env_pool
        self.trainer = trainer
        """A trainer handle to use instead of a private trainer actor (e.g. a shared training service)."""
        self.inference = inference
        """(name, hardware class, handle) of inference workers to use instead of private ones (shared ones)."""
        self.run_dir = cfg.run_dir
        self.history: list[dict] = []
        self.evals: list[tuple[int, dict]] = []
        self.timings: list[dict[str, float]] = []
        self.step = 0
        self.replay: list[tuple[int, list[Trajectory]]] = []
        """(step, batch) of each train step not yet covered by a checkpoint."""
        self.worker_stats: dict = {}
        self.elapsed_before = 0.0
        """Training seconds of the run(s) before the checkpoint this one resumed from."""

    # ------------------------------------------------------------------ entry point
    async def run(self) -> RunResult:
        with pinned(self.cfg.rollout_cpus):  # this process is the rollout side (envs, scheduler, proxy)
            return await self._run()

    async def _run(self) -> RunResult:
        started = time.perf_counter()
        self.cfg, tokenizer = prepare_run(self.cfg)
        cfg = self.cfg  # resolved: what every component receives and config.json records
        self.logger: MetricsLogger | None = None
        self.c: Components = await build(cfg, self.trainer, self.inference)
        self.scoring: Scoring | None = None
        try:
            self.actions = run_actions(cfg)
            self.scoring = await Scoring.start(cfg, tokenizer, self.reward_fn, self.actions)
            self.buffer = SampleBuffer(cfg.buffer)
            pool = self.env_pool or self.c.env_pool or EnvPool.inprocess()
            manager = EnvManager(self.c.proxy, tokenizer, pool, gate=self.buffer, actions=self.actions)
            self.eval_manager = EnvManager(self.c.proxy, tokenizer, pool, gate=None, actions=self.actions)
            self.gateway = await start_gateway(self.c.proxy, tokenizer, [*self.tasks, *self.eval_tasks])
            if self.gateway is not None:  # agent tasks: run through the OpenAI-compatible gateway
                manager = TaskRunner(manager, AgentRunner(self.gateway, gate=self.buffer))
                self.eval_manager = TaskRunner(self.eval_manager, AgentRunner(self.gateway))
            self.heldout = HeldOutEval(self.eval_manager, self.heldout_tasks, cfg.heldout_episodes, cfg.eval_every,
                                       lambda: self.c.proxy.version, self._log_eval)
            self.scheduler = RolloutScheduler(self.tasks, manager, cfg.rollout, buffer=self.buffer,
                                              rewards=self.scoring.dispatcher)
            self.weights = WeightSync(self.c.trainer, self.c.store, self.c.proxy, cfg.bucket_bytes,
                                      cfg.weight_link_bytes_per_s, cfg.weights)
            self.weights.store_moved.append(self.c.repoint_store)
            self.recovery = Recovery(self.c.trainer, self.c.store, self.weights, self.buffer, self.c.proxy,
                                     self.run_dir / "checkpoints", cfg.alpha)
            resumed = await self._maybe_resume()
            # after a resume tensorboard drops what the stopped run logged past its checkpoint (no step twice)
            self.logger = MetricsLogger(self.run_dir, config=cfg, purge_step=self.step + 1 if resumed else None)
            if cfg.eval_at_start and not self.evals:
                await self._evaluate()
            self.bar = None if cfg.quiet else ProgressBar(cfg.total_steps, start_step=min(self.step, cfg.total_steps))
            self.train_started = self.checkpointed_at = time.perf_counter()
            loop = {"async": self._run_overlapped, "areal": self._run_overlapped,
                    "sync": self._run_sync, "oneoff": self._run_oneoff}[cfg.mode]
            try:
                await loop()
                await self.heldout.drain()
                self.worker_stats = await self._worker_stats()
                self.device_stats = await self._device_stats()
                await self._checkpoint(final=True)
            except ActorDeadError as e:  # a trainer or weight store with no restart left
                raise self.recovery.as_lost(e) from None
            except RolloutError as e:
                raise RolloutError(self._rollout_cause(e)) from None
            # the weights of this step were already evaluated (e.g. the stop-at-success check): reuse it
            fresh = self.evals and self.evals[-1][0] == self.step
            final = self.evals[-1][1] if fresh else await self._evaluate() if cfg.eval_at_end else {}
        finally:
            if getattr(self, "heldout", None) is not None:
                await self.heldout.cancel()
            if getattr(self, "gateway", None) is not None:
                await self.gateway.close()
            if getattr(self, "bar", None) is not None:
                self.bar.close()
            if self.logger is not None:
                self.logger.close()
            await self.c.close()
            if self.scoring is not None:
                await self.scoring.close()
            if getattr(self, "actions", None) is not None:
                await self.actions.close()
        return RunResult(steps=len(self.history), version=self.weights.version, final_success=final,
                         history=self.history, evals=self.evals, timings=self.timings, wall_s=time.perf_counter() - started,
                         run_dir=str(self.run_dir), buffer=self.buffer.stats(), workers=self.worker_stats,
                         devices=getattr(self, "device_stats", {}))

    # ------------------------------------------------------------------ the three loops
    async def _run_overlapped(self) -> None:
        """async / areal: rollout never stops; the six steps run every iteration."""
        rollout = asyncio.create_task(self.scheduler.run(), name="rollout")
        training: asyncio.Task | None = None
        try:
            while True:
                while not self._done(in_flight=training is not None):
                    if training is not None:  # publish the version it produced (installed at ③)
                        await self._trained(self._finish(training, rollout, extra, pull))
                        training = None
                    t0 = time.perf_counter()
                    batch = await self._unless_failed(self.buffer.get_batch(self.cfg.batch_size), rollout)  # ①
                    extra = {"system/get_batch_wait_s": time.perf_counter() - t0,
                             "rollout/window_start": float(self.buffer.window_start())}
                    # the next batch forms with the agent one version on: free the slots of what it cannot take
                    await self.buffer.retire_before_next(self.buffer.version + 1)
                    # ⑥ needs only the batch, so it starts now; the rest of the background pull then hides
                    # behind training and rollout (both keep running), and ② suspends only for the swap.
                    training = asyncio.create_task(self._train(batch, {}))                           # ⑥
                    pull = (time.perf_counter(), 0.0)
                    extra.update(await self._swap_weights(rollout))                                 # ② ③ ④ ⑤
                    pull = (pull[0], extra.pop("_pulled_at", pull[0]))
                    await self._maybe_evaluate(rollout)
                if training is None:
                    return
                by_target = self._target_held()
                await self._trained(self._finish(training, rollout, extra, pull))
                training = None
                await self._trained(self._update_now())
                if not by_target or await self._final_weights_hold():
                    return
        finally:
            rollout.cancel()
            if training is not None and not training.done():
                training.cancel()
            await asyncio.gather(rollout, *([training] if training is not None else []), return_exceptions=True)

    async def _finish(self, training: asyncio.Task, rollout: asyncio.Task, extra: dict,
                      pull: tuple[float, float]) -> None:
        await self._finish_train(_exposed_pull(await self._unless_failed(training, rollout), extra, pull))

    async def _swap_weights(self, rollout: asyncio.Task) -> dict:
        """② ③ ④ while the train step runs: the pull of the newest version is finished first (rollout goes on),
        then the suspension covers only the swap. A weight store that dies meanwhile takes this version with it
        (the next published one replaces it) once it is back."""
        try:
            await self._unless_failed(self.weights.prefetch(), rollout)
            pulled_at = time.perf_counter()
            await self.c.proxy.suspend()                                                             # ②
            try:
                sync = await self.weights.update_workers()                                           # ③
                await self.buffer.set_version(self.weights.version)  # the agent LLM's version gates the window
            finally:
                await self.c.proxy.resume()                                                          # ④ ⑤
        except (ActorDeadError, RemoteError) as e:
            if not self.recovery.is_store_loss(e):
                raise
            await self.recovery.store_back(e)
            return {}
        return {**sync, "_pulled_at": pulled_at}

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

    async def _run_sync(self) -> None:
        """Sync+: collect a batch (trajectory-level envs and rewards), train, update; rollout waits."""
        while not self._done():
            t0 = time.perf_counter()
            batch = _flatten(await self.scheduler.collect_batch(self.cfg.batch_groups))
            extra = {"system/rollout_s": time.perf_counter() - t0}
            await self._trained(self._train_and_finish(batch, extra))
            await self._trained(self._update_now())
            await self._maybe_evaluate()

    async def _train_and_finish(self, batch: list[Trajectory], extra: dict) -> None:
        await self._finish_train(await self._train(batch, extra))

    async def _run_oneoff(self) -> None:
        """One-off: rollout of the next batch (previous weights) overlaps training on this one."""
        batch = _flatten(await self.scheduler.collect_batch(self.cfg.batch_groups))
        while not self._done():
            training = asyncio.create_task(self._train_and_finish(batch, {}))
            collecting = asyncio.create_task(self.scheduler.collect_batch(self.cfg.batch_groups))
            try:
                await self._trained(training)
            except BaseException:
                collecting.cancel()
                raise
            t0 = time.perf_counter()
            batch = _flatten(await collecting)
            self.logger.log({"system/get_batch_wait_s": time.perf_counter() - t0}, self.step)
            await self._trained(self._update_now())
            await self._maybe_evaluate()

    # ------------------------------------------------------------------ steps
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

    def _log_eval(self, metrics: dict, step: int) -> None:
        if self.logger is not None:
            self.logger.log(metrics, step)
            self.logger.flush()

    def _elapsed(self) -> float:
        """Training seconds so far, across resumes."""
        return self.elapsed_before + time.perf_counter() - self.train_started

    async def _update_now(self) -> None:
        """Steps ②–④ outside the overlapped loop (sync / oneoff / end of run)."""
        sync = await self.recovery.update_now()
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

    async def _final_weights_hold(self) -> bool:
        """The target held on the weights evaluated last, but a train step was in flight when it did: evaluate
        the weights it produced (the run's final ones). If they miss the target, training goes on until the
        target holds again, so the run never ends on weights that were not shown to meet it."""
        await self._evaluate()
        if self._done():
            return True
        log.info("step %d: the in-flight step's weights missed stop_at_success; training goes on", self.step)
        return False

    def _target_held(self) -> bool:
        """stop_at_success met on every task by each of the last ``stop_consecutive`` evaluations."""
        cfg = self.cfg
        recent = self.evals[-cfg.stop_consecutive:]
        if cfg.stop_at_success is None or len(recent) < cfg.stop_consecutive:
            return False
        return all(v >= cfg.stop_at_success for _, success in recent for k, v in success.items() if k != "mean")

    async def _device_stats(self) -> dict:
        """Device and peak GPU memory of the trainer and of each worker that reports them (diagnostics)."""
        out = {name: {k: st[k] for k in ("device", "peak_memory_gb") if k in st}
               for name, st in self.worker_stats.items() if "peak_memory_gb" in st}
        try:
            out["trainer"] = await self.c.trainer.call("device_stats")
        except Exception as e:  # noqa: BLE001 - e.g. a shared training service that does not answer it
            log.info("trainer device stats: %s", e)
        return out

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
        from rollart.actors import RemoteError
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

    def _rollout_cause(self, error: RolloutError) -> str:
        """The rollout's error, led by its cause when every inference worker is gone for good."""
        workers = self.c.proxy.workers.values()
        if not workers or not all(w.dead for w in workers):
            return str(error)
        causes = "; ".join(f"{w.name}: {getattr(w.handle, 'dead_reason', '') or 'failed'}" for w in workers)
        return f"every inference worker is dead ({causes}); so {error}"

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
