"""Coordinator: one run from its config to its result (RollArt §6.2, Fig. 9): checks what it can before anything
starts, builds the model folder, starts the actors and opens the parts, runs the mode's loop
(``rollart.pipeline.loops``), and closes everything it opened, whatever happened.

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

``sync`` (Sync+) collects a batch, trains, then updates; ``oneoff`` collects batch k+1 with the previous
weights while training on batch k. The same parts serve every mode.
"""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Callable

from rollart.actors import ActorDeadError
from rollart.cpus import pinned
from rollart.monitor import MetricsLogger, ProgressBar
from rollart.pipeline.checkpointing import Checkpointer
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.emulated import trainer_outran
from rollart.pipeline.evaluate import Evaluator
from rollart.pipeline.loops import LOOPS
from rollart.pipeline.parts import RunParts, open_parts
from rollart.pipeline.preflight import preflight
from rollart.pipeline.prepare import load_model_folder
from rollart.pipeline.resolve import resolve
from rollart.pipeline.run import Run
from rollart.pipeline.run_actors import start_actors
from rollart.pipeline.run_state import RunResult, RunState, RunTasks
from rollart.rewards.dispatch import RewardFn
from rollart.pipeline.train_steps import TrainSteps
from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_manager import EnvManager, TaskSpec
from rollart.rollout.group_scheduler import RolloutError

log = logging.getLogger("rollart.pipeline")


class Coordinator:
    """One run of ``cfg`` on ``tasks`` (see the module docstring).

    ``eval_tasks``: played greedily every ``eval_every`` steps (default: ``tasks``); ``heldout_tasks``: disjoint
    from training, played in the background (``heldout_episodes``); ``reward_fn``: scores trajectories in code;
    ``env_pool``: envs hosted elsewhere; ``trainer`` / ``inference``: shared services to use instead of private
    actors (rollart.multiplex); ``interaction``: wraps the training env manager, for baselines that interact
    otherwise than trajectory by trajectory (``rollart.sim.batched.BatchedInteraction``)."""

    def __init__(self, cfg: PipelineConfig, tasks: list[TaskSpec], eval_tasks: list[TaskSpec] | None = None,
                 reward_fn: RewardFn | None = None, env_pool: EnvPool | None = None, trainer: Any = None,
                 heldout_tasks: list[TaskSpec] | None = None, inference: list | None = None,
                 interaction: Callable[[EnvManager], Any] | None = None):
        self.tasks = RunTasks(tasks, eval_tasks if eval_tasks is not None else tasks,
                              list(heldout_tasks or []) if cfg.heldout_episodes else [])
        self.plan = preflight(cfg, self.tasks, reward_fn, registered_envs=env_pool is None)
        self.cfg = resolve(cfg, self.plan)
        """The resolved config: what every part receives and config.json records (the tokenizer's pad id is
        filled in once the model folder exists)."""
        self.reward_fn, self.env_pool, self.trainer, self.inference = reward_fn, env_pool, trainer, inference
        self.interaction = interaction
        self.run_dir = cfg.run_dir
        self.state = RunState()
        self.parts: RunParts | None = None
        """The run's actors and parts once started (diagnostics and fault injection read them)."""

    @property
    def step(self) -> int:
        return self.state.step

    async def run(self) -> RunResult:
        with pinned(self.cfg.rollout_cpus):  # this process is the rollout side (envs, scheduler, proxy)
            return await self._run()

    async def _run(self) -> RunResult:
        started = time.perf_counter()
        self.cfg, tokenizer = load_model_folder(self.cfg, self.tasks.train)
        cfg, st = self.cfg, self.state
        async with contextlib.AsyncExitStack() as stack:
            actors = await start_actors(cfg, self.plan, self.trainer, self.inference)
            stack.push_async_callback(actors.close)
            logger = MetricsLogger(self.run_dir, loggers=cfg.logger)
            stack.callback(logger.close)
            parts = self.parts = await open_parts(cfg, actors, tokenizer, self.tasks, self.reward_fn,
                                                  self.env_pool, logger, stack, self.interaction)
            checkpointer = Checkpointer(cfg, st, parts)
            evaluator = Evaluator(cfg, st, parts.eval_manager, self.tasks.eval, logger)
            resumed = await checkpointer.resume()
            if resumed:  # tensorboard drops what the stopped run logged past its checkpoint (no step twice)
                logger.rewind(st.step)
            logger.log_config(cfg, step=st.step + 1 if resumed else 0)
            if cfg.eval_at_start and not st.evals:
                await evaluator.evaluate()
            bar = None if cfg.quiet else ProgressBar(cfg.total_steps, start_step=min(st.step, cfg.total_steps))
            if bar is not None:
                stack.callback(bar.close)
            run = Run(cfg, st, parts, TrainSteps(cfg, st, parts, logger, checkpointer, bar), evaluator, checkpointer)
            st.start_training()
            try:
                await LOOPS[cfg.mode](run)
                await parts.heldout.drain()
                workers = await actors.worker_stats(cfg.simulate_hardware)
                if outran := trainer_outran(st.history, cfg.sim_time_scale):
                    log.warning("%s", outran)
                devices = await actors.device_stats(workers)
                await checkpointer.save(final=True)
            except ActorDeadError as e:  # a trainer or weight store with no restart left
                raise parts.recovery.as_lost(e) from None
            except RolloutError as e:
                cause = actors.proxy.all_dead_cause()  # lead with it: every worker gone explains the rest
                raise RolloutError(f"{cause}; so {e}" if cause else str(e)) from None
            # the weights of this step were already evaluated (e.g. the stop-at-success check): reuse it
            final = (st.evals[-1].success if st.evaluated_now()
                     else await evaluator.evaluate() if cfg.eval_at_end else {})
        return RunResult(steps=len(st.history), version=parts.weights.version, final_success=final,
                         history=st.history, evals=st.evals, timings=st.timings, wall_s=time.perf_counter() - started,
                         run_dir=str(self.run_dir), buffer=parts.buffer.stats(), rollout=parts.scheduler.stats(),
                         workers=workers, devices=devices)

