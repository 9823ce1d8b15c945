"""EnvManager: one coroutine per trajectory (RollArt §6.1).

reset → generate → step → … until the env terminates or truncates. The manager keeps the
(observation, action) history as token ids, token-in/token-out (:mod:`rollart.rollout.chat`): the
model's own token ids are appended untouched and get ``loss_mask`` 1, their logprobs and policy
versions; template and observation tokens get mask 0. Before each generation it asks the staleness
gate (the SampleBuffer) whether the trajectory may go on. Whatever happens — env error, hang, host
death, bad generation, staleness — the trajectory comes back with a status and a reason; only
cancellation (a redundant extra being dropped) propagates, after the env has been released.
Each turn samples with a seed drawn from (reset seed, trajectory id, turn), so a trajectory's tokens do not
depend on the order in which requests from many trajectories reach the engine.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from rollart.config import ConfigError
from rollart.loader import LoadError, load
from rollart.rollout.chat import ChatFormat
from rollart.rollout.env_client import EnvFailure, EnvPool, EnvSession
from rollart.rollout.row_order import episode_seeds
from rollart.types import SamplingParams, Trajectory


@dataclass
class TaskSpec:
    """One task: which env, how to prompt it, how to sample. ``name`` is the task that hw_mapping routes."""
    name: str
    """Task name; sent as ``task`` with every generation request (hw_mapping routes it)."""
    env_id: str
    """A registered gymnasium id (e.g. rollart/FrozenLake-v0, or your own)."""
    env_kwargs: dict = field(default_factory=dict)
    """Extra kwargs for gymnasium.make."""
    system_prompt: str | None = None
    """System prompt; None takes the env's (rollart.rollout.env_protocol.EnvDefaults), else none."""
    max_new_tokens: int = 0
    """Max new tokens per turn; 0 takes the env's (rollart.rollout.env_protocol.EnvDefaults), else 64."""
    min_new_tokens: int = 0
    """Min new tokens per turn (stop tokens do not end a turn before it); = max_new_tokens fixes every
    answer's length, e.g. to stand for a chain of thought of that length in benchmarks."""
    max_turns: int = 64
    """Safety cap on turns (the env's own time limit normally ends it first)."""
    max_total_tokens: int = 4096
    """Stop (truncate) the trajectory once its token count would exceed this."""
    temperature: float = 1.0
    """Sampling temperature for this task."""
    top_p: float = 1.0
    """Nucleus sampling for this task."""
    faults: dict | None = None
    """If set, wrap each env in rollart.rollout.env_faults.InjectFaults(**faults) (benchmarks, fault tests)."""
    weight: float = 1.0
    """Relative share of groups drawn from this task (and, with ``rollout.keep_task_mix``, of every batch's)."""
    rows: int = 0
    """A dataset task's rows (``rollart.data``), the reset seed choosing one: in training the scheduler deals
    each GRPO group one, every row once per epoch in an order shuffled by the run's seed; in evaluation rows
    0, 1, ... are played (each once); 0: not a dataset task, seeds drawn at random."""
    step_action: str = ""
    """With actions on: ``"module:function"`` telling the action scheduler what a step runs,
    ``fn(action_text, turn, max_turns, reset_info) -> (kind, most_cores)`` (e.g. ``("test_run", 2)`` for
    a test run splittable over 2 cores, ``("file_op", 0)`` for a step that starts no process and so holds
    no core); empty: every step is an ``env_step`` on ``actions.step_cores``."""

    def episode_seeds(self, episodes: int, base: int) -> range:
        """Reset seeds of ``episodes`` evaluation episodes (``rollart.rollout.row_order.episode_seeds``)."""
        return episode_seeds(self.rows, episodes, base)

    def __post_init__(self) -> None:
        if not self.name or not self.env_id:
            raise ConfigError("TaskSpec needs a name (the task) and an env_id")
        if self.max_turns < 1 or self.max_total_tokens < 8 or self.max_new_tokens < 0:
            raise ConfigError(f"task {self.name}: max_turns >= 1, max_total_tokens >= 8, max_new_tokens >= 0")
        if self.min_new_tokens < 0 or (self.max_new_tokens and self.min_new_tokens > self.max_new_tokens):
            raise ConfigError(f"task {self.name}: min_new_tokens must be in [0, max_new_tokens], got "
                              f"min_new_tokens={self.min_new_tokens}, max_new_tokens={self.max_new_tokens}")
        if self.weight <= 0:
            raise ConfigError(f"task {self.name}: weight must be > 0, got {self.weight}")
        if self.rows < 0:
            raise ConfigError(f"task {self.name}: rows must be >= 0, got {self.rows}")


class Policy(Protocol):
    """What plays a trajectory's turns: the LLMProxy in a run (a scripted policy in tests)."""

    async def generate(self, trajectory_id: str, prompt_token_ids: list[int], sampling: SamplingParams,
                       task: str) -> Any: ...

    def release(self, trajectory_id: str) -> None:
        """The trajectory ended: drop what was kept for its next turn (its sticky worker)."""


class StalenessGate(Protocol):
    """What the EnvManager needs from the SampleBuffer (the asynchronous bound)."""
    version: int

    def admit_turn(self, start_version: int, first_turn: bool) -> str | None:
        """None to go on; otherwise the reason the trajectory must be aborted."""

    def track(self, trajectory_id: str, start_version: int, task: asyncio.Task) -> None: ...

    def untrack(self, trajectory_id: str) -> None: ...

    def stale_reason(self, trajectory_id: str) -> str | None: ...


class StaleTrajectory(Exception):
    """Raised inside a trajectory when the gate refuses its next turn."""


class EnvManager:
    """Runs trajectories (see module docstring). One instance serves many concurrent trajectories."""

    def __init__(self, policy: Policy, tokenizer: Any, pool: EnvPool, gate: StalenessGate | None = None,
                 actions: Any = None):
        self.actions = actions
        """A :class:`rollart.actions.run.RunActions` (actions.enabled): env steps wait for its grant of cores."""
        self.policy = policy
        self.tokenizer = tokenizer
        self.pool = pool
        self.gate = gate
        self._formats: dict[str, ChatFormat] = {}

    async def run(self, task: TaskSpec, trajectory_id: str, group_id: str, seed: int | None) -> Trajectory:
        """One trajectory from env open to release."""
        traj = Trajectory.begin(trajectory_id, group_id, task.name, seed)
        started = time.perf_counter()
        session: EnvSession | None = None
        try:
            session = await self.pool.open(task.env_id, task.env_kwargs, task.faults)
            await self._play(task, traj, session, seed)
            traj.status = "done"
        except EnvFailure as e:
            traj.status, traj.reason = "failed", f"env: {e}"
        except StaleTrajectory as e:
            traj.status, traj.reason = "aborted", str(e)
        except asyncio.CancelledError:
            reason = self.gate.stale_reason(trajectory_id) if self.gate else None
            current = asyncio.current_task()
            if reason is None or current is None or current.uncancel() > 0:
                raise  # cancelled from outside (redundant extra / shutdown): propagate
            traj.status, traj.reason = "aborted", reason
        except Exception as e:  # noqa: BLE001 - a bad generation or chat error fails only this one
            traj.status, traj.reason = "failed", f"{type(e).__name__}: {e}"
        finally:
            traj.timings["total"] = time.perf_counter() - started
            if self.gate:
                self.gate.untrack(trajectory_id)
            if session is not None:
                await self.pool.release(session)
            self.policy.release(trajectory_id)
        return traj

    async def _play(self, task: TaskSpec, traj: Trajectory, session: EnvSession, seed: int | None) -> None:
        chat = self._format(task, session)
        max_new = task.max_new_tokens or session.max_new_tokens or 64
        sampling = SamplingParams(temperature=task.temperature, top_p=task.top_p, max_tokens=max_new,
                                  min_tokens=min(task.min_new_tokens, max_new), stop_token_ids=list(chat.stop_token_ids))
        t0 = time.perf_counter()
        obs, info = await session.reset(seed=seed)
        reset_info = info
        traj.timings["env_reset"] += time.perf_counter() - t0
        self._append(traj, chat.first_prompt(_text(obs, task)))
        env_return = 0.0
        for turn in range(task.max_turns):
            self._check_gate(traj, first_turn=(turn == 0))
            t0 = time.perf_counter()
            params = sampling if seed is None else dataclasses.replace(
                sampling, seed=zlib.crc32(f"{seed}/{traj.trajectory_id}/{turn}".encode()))  # not arrival order
            out = await self.policy.generate(traj.trajectory_id, traj.token_ids, params, task.name)
            traj.timings["generate"] += time.perf_counter() - t0
            if out.finish_reason == "abort":
                raise StaleTrajectory(self._abort_reason(traj))
            if turn == 0 and out.versions and min(out.versions) < traj.start_version:
                self._restart_version(traj, min(out.versions))
            self._append(traj, out.token_ids, out.logprobs, out.versions)
            traj.num_turns += 1
            traj.info["prompt_tokens"] = traj.info.get("prompt_tokens", 0) + out.num_prompt_tokens
            traj.info["cached_tokens"] = traj.info.get("cached_tokens", 0) + out.num_cached_tokens
            t0 = time.perf_counter()
            text = chat.action_text(out.token_ids)
            if self.actions is not None:  # an ARL-Tangram action: runs on the cores the scheduler grants
                kind, most = _step_action(task, text, turn, reset_info)
                step = await self.actions.env_step(lambda cores: session.step(text, cores), traj.trajectory_id,
                                                   kind=kind, max_units=most)
            else:
                step = await session.step(text)
            obs, reward, terminated, truncated, info = step
            traj.timings["env_step"] += time.perf_counter() - t0
            env_return += reward
            if terminated or truncated:
                traj.info["truncated"] = bool(truncated and not terminated)
                break
            follow = chat.next_turn(_text(obs, task), out.token_ids)
            if len(traj.token_ids) + len(follow) + max_new > task.max_total_tokens:
                traj.info["truncated"] = "context"
                break
            self._append(traj, follow)
        else:
            traj.info["truncated"] = "max_turns"
        traj.info["env_return"] = env_return
        traj.info["env"] = info
        traj.success = bool(info.get("success", env_return > 0))

    def _check_gate(self, traj: Trajectory, first_turn: bool) -> None:
        if self.gate is None:
            return
        if first_turn:
            traj.start_version = self.gate.version
            task = asyncio.current_task()
            if task is not None:
                self.gate.track(traj.trajectory_id, traj.start_version, task)
        reason = self.gate.admit_turn(traj.start_version, first_turn)
        if reason is not None:
            raise StaleTrajectory(reason)

    def _restart_version(self, traj: Trajectory, version: int) -> None:
        """The first tokens came from older weights than the gate's version (the workers are updated a
        moment after a new version is announced): the trajectory started at the version that generated it."""
        traj.start_version = version
        task = asyncio.current_task()
        if self.gate is not None and task is not None:
            self.gate.track(traj.trajectory_id, version, task)

    def _abort_reason(self, traj: Trajectory) -> str:
        reason = self.gate.stale_reason(traj.trajectory_id) if self.gate else None
        return reason or "generation aborted by the proxy"

    def _format(self, task: TaskSpec, session: EnvSession) -> ChatFormat:
        system = task.system_prompt if task.system_prompt is not None else session.system_prompt
        key = f"{task.name}\x00{system}"
        if key not in self._formats:
            self._formats[key] = ChatFormat(self.tokenizer, system)
        return self._formats[key]

    @staticmethod
    def _append(traj: Trajectory, ids: list[int], logprobs: list[float] | None = None,
                versions: list[int] | None = None) -> None:
        model = logprobs is not None
        traj.token_ids.extend(ids)
        traj.loss_mask.extend([1 if model else 0] * len(ids))
        traj.logprobs.extend(logprobs if model else [0.0] * len(ids))
        traj.versions.extend(versions if versions is not None else [-1] * len(ids))


def _text(observation: Any, task: TaskSpec) -> str:
    if isinstance(observation, str):
        return observation
    raise TypeError(f"env {task.env_id!r} returned a {type(observation).__name__} observation; rollout envs "
                    "speak text: return a string (e.g. render the state) from reset() and step()")


def _step_action(task: TaskSpec, text: str, turn: int, reset_info: dict) -> tuple[str, int | None]:
    if not task.step_action:
        return "env_step", None
    try:
        fn = load(task.step_action, "step_action")
    except LoadError as e:
        raise ConfigError(f"task {task.name}: {e}") from None
    kind, most = fn(text, turn, task.max_turns, reset_info or {})
    return str(kind), int(most)
