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
import json
import logging
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from rollart.actors import ActorDeadError, RemoteError
from rollart.actors.cpus import pinned
from rollart.config import ConfigError
from rollart.monitor import MetricsLogger, ProgressBar
from rollart.pipeline.checkpointing import Checkpointing
from rollart.pipeline.components import Components, build
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.evaluate import Evaluations
from rollart.pipeline.heldout import check_disjoint
from rollart.pipeline.run_parts import RunParts
from rollart.pipeline.scoring import Scoring, check_scoring
from rollart.pipeline.step_accounting import StepAccounting
from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.scheduler import RolloutError
from rollart.types import Trajectory

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


def ensure_model(cfg: PipelineConfig, tasks: Sequence[TaskSpec] = ()) -> str:
    """The model folder to train: cfg.model (checked), or a tiny random-init model built once in the run folder
    (format-warmed on ``tasks`` when cfg.warmup_steps is set; built aside and moved in when complete, so an
    interrupted build is redone, not resumed from)."""
    if cfg.model:
        cfg.check_model()
        return cfg.model
    out = cfg.tiny_model_dir()
    if not (out / "model.safetensors").exists():
        if cfg.warmup_steps and not tasks:
            raise ConfigError(f"warmup_steps={cfg.warmup_steps} needs the run's tasks to warm the model up on")
        from rollart.tools.make_tiny_model import make_tiny_model
        building = out.with_name(out.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        make_tiny_model(building, seed=cfg.seed)
        if cfg.warmup_steps:
            from rollart.tools.format_warmup import format_warmup
            if not cfg.quiet:
                print(f"format warm-up of the tiny model: {cfg.warmup_steps} supervised steps on random-action "
                      "transcripts (the answer format only) ...", file=sys.stderr, flush=True)
            warm = format_warmup(building, tasks, cfg.warmup_steps, seed=cfg.seed)
            (building / "warmup.json").write_text(json.dumps(asdict(warm), indent=2) + "\n")
            log.info("format warm-up: %d steps in %.1f s, answer loss %.2f -> %.2f", warm.steps, warm.seconds,
                     warm.first_loss, warm.last_loss)
        shutil.rmtree(out, ignore_errors=True)
        building.rename(out)
    return str(out)


def prepare_run(cfg: PipelineConfig, tasks: Sequence[TaskSpec] = ()) -> tuple[PipelineConfig, Any]:
    """The run's resolved config and its tokenizer: the model folder (a tiny one built in the run folder when
    ``cfg.model`` is empty) and its tokenizer's pad id filled in by ``cfg.resolve``. The run folder is made
    only once the config has passed its checks."""
    from rollart.models import load_tokenizer
    cfg.check_model()
    cfg.check_derived(cfg.resolve(model=cfg.model or str(cfg.tiny_model_dir()), pad_id=cfg.trainer.pad_id))
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    model = ensure_model(cfg, tasks)
    tokenizer = load_tokenizer(model)
    resolved = cfg.resolve(model=model, pad_id=tokenizer.pad_token_id or 0)
    cfg.check_derived(resolved)  # trainer.pad_id, now that the tokenizer is known
    return resolved, tokenizer


class Coordinator(RunParts, StepAccounting, Evaluations, Checkpointing):
    """One run: the loops below, over the parts it opens (run_parts), its train steps (step_accounting),
    evaluations (evaluate) and checkpoints (checkpointing)."""

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
        self.cfg, tokenizer = prepare_run(self.cfg, self.tasks)
        cfg = self.cfg  # resolved: what every component receives and config.json records
        self.logger: MetricsLogger | None = None
        self.c: Components = await build(cfg, self.trainer, self.inference)
        self.scoring: Scoring | None = None
        try:
            await self._open_parts(cfg, tokenizer)
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
            await self._close_parts()
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

    async def _run_sync(self) -> None:
        """Sync+: collect a batch (trajectory-level envs and rewards), train, update; rollout waits."""
        while not self._done():
            t0 = time.perf_counter()
            batch = _flatten(await self.scheduler.collect_batch(self.cfg.batch_groups))
            extra = {"system/rollout_s": time.perf_counter() - t0}
            await self._trained(self._train_and_finish(batch, extra))
            await self._trained(self._update_now())
            await self._maybe_evaluate()

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
