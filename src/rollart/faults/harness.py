"""A short real run of a recipe's pipeline, driven under a fault.

:class:`Harness` shrinks the recipe's own config (``default_config()`` and ``TASK`` of the recipe module, the
FrozenLake quickstart by default) to a few steps of two GRPO groups, with one tiny model shared by every run,
the torch trainer with a ledger (``rollart.faults.trainer_ledger``) and a reward function that remembers its
scores. :meth:`Harness.drive` runs the Coordinator while watching it from outside: it fires the fault's hooks
when the run reaches a step, and stops a run that makes no progress for ``stall_s`` (a deadlock) or outlives
its deadline. Whatever happened, it returns an :class:`Outcome` with the buffer's counters and the ledger.
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from rollart.faults.ledger import Accounts, account, read_ledger
from rollart.faults.rewards import ScoreBook
from rollart.faults.trainer_ledger import LEDGER_ENV

LEDGER_BACKEND = "rollart.faults.trainer_ledger:LedgerTrainer"
DEFAULT_RECIPE = "recipes.grpo_frozenlake"

Hook = Callable[[Any], Awaitable[str] | str]
"""Called with the Coordinator once the run reaches a step; returns what it did (for the report)."""


@dataclass
class Outcome:
    completed: bool
    """The run returned normally (every step trained)."""
    error: str = ""
    """How it ended otherwise: the exception's type and first line, or the stall."""
    stalled: bool = False
    """Stopped by the watchdog: no training step for ``stall_s`` (or past the deadline)."""
    steps: int = 0
    """The run's step counter at the end (includes the steps of a resumed checkpoint)."""
    result: Any = None
    """The RunResult, when completed."""
    buffer: dict = field(default_factory=dict)
    scheduler: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)
    """Why trajectories failed or were aborted (the scheduler's reason counts)."""
    ledger: list[dict] = field(default_factory=list)
    accounts: Accounts | None = None
    events: list[str] = field(default_factory=list)
    """What the hooks did, with the step they fired at."""
    seconds: float = 0.0
    system_rejected: int | None = None
    """Frames the run's actor system rejected as malformed (None: not readable)."""
    system_rejections: dict = field(default_factory=dict)
    """The same by what was wrong (``ActorSystem.rejections``)."""
    row_orders: dict = field(default_factory=dict)
    """Task name -> its RowOrder at the end (dataset tasks, or tasks given rows)."""

    def reason_count(self, *needles: str) -> int:
        return sum(n for key, n in self.reasons.items() if any(s in key for s in needles))


def _error_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


class Harness:
    """Builds and drives the short runs of one fault-suite invocation, all under ``workdir``."""

    def __init__(self, workdir: Path, recipe: str = DEFAULT_RECIPE, steps: int = 6, stall_s: float = 150.0,
                 deadline_s: float = 420.0):
        self.workdir = Path(workdir)
        self.recipe_name = recipe
        self.steps = steps
        self.stall_s = stall_s
        self.deadline_s = deadline_s
        try:
            module = importlib.import_module(recipe)  # by name, as `play --import` does: the library ships none
        except ImportError as e:
            raise SystemExit(f"error: cannot import the recipe {recipe!r} ({e}); run from a checkout or an install "
                             "of rollart, or pass --recipe MODULE") from None
        if not (hasattr(module, "default_config") and hasattr(module, "TASK")):
            raise SystemExit(f"error: recipe {recipe!r} has no default_config() and TASK; pass --recipe with a "
                             "single-task recipe such as recipes.grpo_frozenlake")
        self.base_config = module.default_config()
        self.task = module.TASK
        if self.base_config.trainer.backend != "torch":
            raise SystemExit(f"error: recipe {recipe!r} trains with trainer.backend={self.base_config.trainer.backend}"
                             "; the fault suite's trainer ledger extends the torch trainer")
        self._model: str | None = None

    # ------------------------------------------------------------------ configs
    def model(self) -> str:
        """One tiny random-init model (the quickstart's) for every run, built once."""
        if self._model is None:
            out = self.workdir / "model"
            if not (out / "model.safetensors").exists():
                from rollart.tools.make_tiny_model import make_tiny_model
                make_tiny_model(out, seed=self.base_config.seed)
            self._model = str(out)
        return self._model

    def config(self, name: str, fresh: bool = True, **overrides: Any) -> Any:
        """The recipe's config, shrunk: ``self.steps`` steps of 2 groups of 8, checkpoints every 2 steps, no
        evaluation, its own run folder ``workdir/name`` (emptied first when ``fresh``)."""
        base = self.base_config
        rollout = dataclasses.replace(base.rollout, group_size=8, max_concurrency=32,
                                      **overrides.pop("rollout", {}))
        trainer = dataclasses.replace(base.trainer, backend=LEDGER_BACKEND)
        run_dir = self.workdir / name
        if fresh and run_dir.exists():
            shutil.rmtree(run_dir)
        settings = dict(total_steps=self.steps, batch_groups=2, rollout=rollout, trainer=trainer, eval_every=0,
                        eval_at_end=False, stop_at_success=None, time_limit_s=0.0, logdir=str(self.workdir),
                        run_name=name, checkpoint_every=2, keep_checkpoints=2, model=self.model(), warmup_steps=0,
                        quiet=True)
        settings.update(overrides)
        return dataclasses.replace(base, **settings)

    # ------------------------------------------------------------------ driving a run
    async def drive(self, cfg: Any, hooks: list[tuple[int, Hook]] = (), env_pool: Any = None,
                    scores: ScoreBook | None = None, task: Any = None) -> Outcome:
        """Run ``cfg`` on ``task`` (default: the recipe's) to its end under the watchdog; ``hooks``: (step, fn)
        pairs, each fired once the run reached that step."""
        from rollart.pipeline import Coordinator

        ledger = Path(cfg.logdir) / cfg.run_name / "ledger.jsonl"
        ledger.parent.mkdir(parents=True, exist_ok=True)
        ledger.unlink(missing_ok=True)
        os.environ[LEDGER_ENV] = str(ledger)  # actor processes inherit it
        scores = scores if scores is not None else ScoreBook()
        started = time.monotonic()
        outcome = Outcome(completed=False)
        coordinator = Coordinator(cfg, [task or self.task], reward_fn=scores, env_pool=env_pool)
        run = asyncio.create_task(coordinator.run(), name=f"fault-run-{cfg.run_name}")
        pending = sorted(hooks, key=lambda h: h[0])
        last_step, last_change = coordinator.step, time.monotonic()
        try:
            while not run.done():
                await asyncio.wait({run}, timeout=0.25)  # a watchdog from outside the run: it samples the step
                step = coordinator.step
                now = time.monotonic()
                if step != last_step:
                    last_step, last_change = step, now
                while pending and step >= pending[0][0] and not run.done():
                    at, hook = pending.pop(0)
                    try:
                        did = hook(coordinator)
                        did = await did if asyncio.iscoroutine(did) else did
                    except Exception as e:  # noqa: BLE001 - a fault that could not be injected is reported
                        did = f"could not inject: {_error_line(e)}"
                    outcome.events.append(f"step {step}: {did}")
                if run.done():
                    break
                if now - last_change > self.stall_s or now - started > self.deadline_s:
                    outcome.stalled = True
                    outcome.error = (f"no training step for {now - last_change:.0f} s (at step {step})"
                                     if now - last_change > self.stall_s else
                                     f"still running after the {self.deadline_s:.0f} s deadline (step {step})")
                    run.cancel()
                    break
            try:
                outcome.result = await asyncio.wait_for(asyncio.shield(run), 60.0) if outcome.stalled else await run
                outcome.completed = not outcome.stalled
            except asyncio.CancelledError:
                if not outcome.stalled:
                    raise
            except TimeoutError:
                outcome.error += "; the run did not stop within 60 s of being cancelled"
            except BaseException as e:  # noqa: BLE001 - how the run ended is the measurement
                if isinstance(e, KeyboardInterrupt):
                    raise
                outcome.error = outcome.error or _error_line(e)
        finally:
            if not run.done():
                run.cancel()
            os.environ.pop(LEDGER_ENV, None)
        outcome.seconds = time.monotonic() - started
        outcome.steps = coordinator.step
        parts = coordinator.parts  # None when the run failed before its parts were open
        outcome.buffer = parts.buffer.stats() if parts is not None else {}
        if parts is not None:
            outcome.scheduler = dict(parts.scheduler.counters)
            outcome.reasons = dict(parts.scheduler.reasons)
            outcome.system_rejected = parts.actors.system.rejected
            outcome.system_rejections = parts.actors.system.rejections
            outcome.row_orders = dict(parts.scheduler.row_orders)
        outcome.ledger = read_ledger(ledger)
        outcome.accounts = account(outcome.buffer, outcome.ledger, scores.scores)
        return outcome
