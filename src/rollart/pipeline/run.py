"""A run in progress: the objects its loop drives, composed (run state, parts, train steps, evaluator,
checkpointer), and the run-level rules the loops share: when to stop, when to evaluate."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable

from rollart.pipeline.checkpointing import Checkpointer
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.evaluate import Evaluator
from rollart.pipeline.parts import RunParts
from rollart.pipeline.run_state import RunState
from rollart.pipeline.train_steps import TrainSteps

log = logging.getLogger("rollart.pipeline")


@dataclass
class Run:
    cfg: PipelineConfig
    state: RunState
    parts: RunParts
    steps: TrainSteps
    evaluator: Evaluator
    checkpointer: Checkpointer

    def done(self, in_flight: bool = False) -> bool:
        """total_steps reached (counting a step ``in_flight``), the time limit passed, or the target held."""
        cfg, st = self.cfg, self.state
        if st.step + in_flight >= cfg.total_steps:
            return True
        if cfg.time_limit_s and time.perf_counter() - st.train_started > cfg.time_limit_s:
            log.warning("time limit %.0f s reached after %d steps", cfg.time_limit_s, st.step)
            return True
        return self.evaluator.target_held()

    async def maybe_evaluate(self, rollout: asyncio.Task | None = None) -> None:
        """Evaluate when due (every ``eval_every`` steps); with ``rollout`` running, fail at once if it dies."""
        if self.evaluator.due():
            coro = self.evaluator.evaluate()
            await (unless_failed(coro, rollout) if rollout is not None else coro)

    async def final_weights_hold(self) -> bool:
        """The target held on the weights evaluated last, but a train step was in flight when it did: evaluate
        the weights it produced (the run's final ones). If they miss the target, training goes on until the
        target holds again, so the run never ends on weights that were not shown to meet it."""
        await self.evaluator.evaluate()
        if self.done():
            return True
        log.info("step %d: the in-flight step's weights missed stop_at_success; training goes on", self.state.step)
        return False


async def unless_failed(coro: Awaitable[Any], background: asyncio.Task) -> Any:
    """Await ``coro`` but raise at once if ``background`` (the rollout) died meanwhile."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task, background}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    background.result()  # raises the rollout's error
    raise RuntimeError("rollout stopped unexpectedly")
