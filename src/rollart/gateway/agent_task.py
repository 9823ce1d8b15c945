"""AgentTask: a user's agent, run through the gateway as one trajectory coroutine.

    async def agent(base_url: str, api_key: str, task: AgentInstance) -> float | dict | None:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key)
        ...                                    # any loop of calls, tools, sub-processes
        return reward                          # or {"reward": r, "success": b}, or None

    AgentTask("lookup", agent, make_task=lambda seed: {...})

The scheduler runs an AgentTask exactly as it runs an env task (same GRPO groups, redundancy, replacements,
``max_concurrency``): :class:`AgentRunner` stands beside the EnvManager and takes the same
``run(task, trajectory_id, group_id, seed)``. The staleness gate works the same way: the first call fixes the
trajectory's start version and each call asks ``admit_turn`` first (a refused call answers 409 and the
trajectory ends ``aborted``); the gate cancels a stale trajectory's coroutine, which cancels the agent, whose
open HTTP request is then dropped and its generation aborted. Suspend/resume happens in the proxy, so calls
simply wait during a weight swap. The trajectory is what the gateway recorded (token-in/token-out, with its
forks); its reward is the agent's return value, or ``reward_fn(AgentResult)`` computed afterwards from the
recorded calls. A reward the run's scoring computes (``reward_fn`` of the run) still applies on top: the
agent's reward is the trajectory's ``info["env_return"]``, what the default scoring takes.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from rollart.config import ConfigError
from rollart.gateway.record import Call
from rollart.gateway.server import Gateway
from rollart.gateway.session import AgentSession, CallRefused
from rollart.gateway.tool_format import ToolSyntax
from rollart.rollout.row_order import episode_seeds
from rollart.types import GenerationResult, SamplingParams, Trajectory


@dataclass
class AgentInstance:
    """What the agent is given: the task's name, the instance's seed and the data ``make_task`` made from it."""
    name: str
    seed: int | None
    data: Any = None
    gateway_socket: str | None = None
    """The gateway's unix socket (how a sandboxed agent reaches it: rollart.gateway.sandboxed)."""


@dataclass
class AgentResult:
    """What ``reward_fn`` sees when the agent returns no reward."""
    instance: AgentInstance
    calls: list[Call]
    texts: list[str]
    """Each call's completion decoded (special tokens skipped)."""
    returned: Any = None


Agent = Callable[[str, str, AgentInstance], Awaitable[Any]]


@dataclass
class AgentTask:
    """One agent task. ``name`` is the task hw_mapping routes, as for env tasks."""
    name: str
    agent: Agent
    """``async def agent(base_url, api_key, task) -> reward`` (see module docstring)."""
    make_task: Callable[[int | None], Any] | None = None
    """seed -> the data of one task instance (``AgentInstance.data``); None gives the agent the seed only."""
    reward_fn: Callable[[AgentResult], float] | None = None
    """Reward from the recorded calls, used when the agent returns None."""
    max_new_tokens: int = 64
    """Most new tokens per call (a request's max_tokens may lower it)."""
    temperature: float = 1.0
    """Sampling temperature of every call (the policy being trained samples; the request's is ignored)."""
    top_p: float = 1.0
    max_calls: int = 32
    """Calls one trajectory may make; the next one is refused (429) and the agent should stop."""
    timeout_s: float = 300.0
    """Seconds one trajectory may take (the agent is cancelled after it and the trajectory fails)."""
    weight: float = 1.0
    """Relative share of groups drawn from this task."""
    rows: int = 0
    """Task instances ``make_task`` serves by index (the seed it is given), as a dataset task's rows: in training
    each GRPO group is dealt one, every index once per epoch in an order shuffled by the run's seed; evaluation
    plays 0, 1, ... (each once); 0: seeds drawn at random."""
    tool_syntax: ToolSyntax = ToolSyntax()
    """How the model writes a tool call (rollart.gateway.tool_format); the default ``<tool>NAME ARGS</tool>``."""
    sample_reply: Callable[[Any, int], str] | None = None
    """``(rng, call) -> text``: a valid reply at the agent's ``call``-th call (0-based), drawn without looking at the
    task instance (numpy Generator ``rng``). Lets the run's format warm-up (``warmup_steps``) teach a fresh model
    the agent's protocol and nothing of its task (rollart.gateway.warmup)."""

    def episode_seeds(self, episodes: int, base: int) -> range:
        """Reset seeds of ``episodes`` evaluation episodes (``rollart.rollout.row_order.episode_seeds``)."""
        return episode_seeds(self.rows, episodes, base)

    def __post_init__(self) -> None:
        if not self.name or not callable(self.agent):
            raise ConfigError("AgentTask needs a name and an agent: async def agent(base_url, api_key, task)")
        if self.max_new_tokens < 1 or self.max_calls < 1 or self.timeout_s <= 0 or self.weight <= 0 or self.rows < 0:
            raise ConfigError(f"agent task {self.name}: max_new_tokens >= 1, max_calls >= 1, timeout_s > 0, "
                              "weight > 0 and rows >= 0")


class _Stale(Exception):
    pass


class _GateGuard:
    """Checks every call of one trajectory against the staleness gate and the task's call budget."""

    def __init__(self, gate: Any, traj: Trajectory, task: AgentTask, coroutine: asyncio.Task | None) -> None:
        self.gate, self.traj, self.task, self.coroutine = gate, traj, task, coroutine
        self.refused: str | None = None

    def before_call(self, session: AgentSession) -> None:
        first = not session.calls
        if not first and len(session.calls) >= self.task.max_calls:
            raise CallRefused(429, f"trajectory {session.trajectory_id} made its max_calls={self.task.max_calls} "
                                   "calls; stop and return", "max_calls")
        if self.gate is None:
            return
        if first:
            self.traj.start_version = self.gate.version
            if self.coroutine is not None:
                self.gate.track(self.traj.trajectory_id, self.traj.start_version, self.coroutine)
        reason = self.gate.admit_turn(self.traj.start_version, first)
        if reason is not None:
            self.refused = reason
            raise CallRefused(409, f"trajectory {session.trajectory_id} was aborted: {reason}", "aborted")

    def after_call(self, session: AgentSession, out: GenerationResult) -> None:
        if len(session.calls) == 0 and out.versions and min(out.versions) < self.traj.start_version:
            self.traj.start_version = min(out.versions)  # generated by the weights before the announced version
            if self.gate is not None and self.coroutine is not None:
                self.gate.track(self.traj.trajectory_id, self.traj.start_version, self.coroutine)


class AgentRunner:
    """Runs AgentTasks through a started Gateway (see module docstring)."""

    def __init__(self, gateway: Gateway, gate: Any = None) -> None:
        self.gateway, self.gate = gateway, gate

    async def run(self, task: AgentTask, trajectory_id: str, group_id: str, seed: int | None) -> Trajectory:
        traj = Trajectory.begin(trajectory_id, group_id, task.name, seed)
        started = time.perf_counter()
        guard = _GateGuard(self.gate, traj, task, asyncio.current_task())
        sampling = SamplingParams(temperature=task.temperature, top_p=task.top_p, max_tokens=task.max_new_tokens)
        session = self.gateway.open(trajectory_id, task.name, group_id, sampling=sampling, seed=seed, guard=guard,
                                    tool_syntax=task.tool_syntax)
        try:
            instance = AgentInstance(task.name, seed, task.make_task(seed) if task.make_task else None,
                                     self.gateway.unix_path)
            try:
                async with asyncio.timeout(task.timeout_s):
                    returned = await task.agent(self.gateway.base_url, session.api_key, instance)
            except Exception:
                if guard.refused is not None:
                    raise _Stale(guard.refused) from None
                raise
            if guard.refused is not None:
                raise _Stale(guard.refused)
            if not session.calls:
                raise RuntimeError("the agent made no call to the gateway, so there is nothing to train on")
            reward, success = self._reward(task, session, instance, returned)
            session.record.fill(traj)
            traj.info["env_return"] = reward
            traj.success = success
            traj.status = "done"
        except _Stale as e:
            traj.status, traj.reason = "aborted", str(e)
        except TimeoutError:
            traj.status, traj.reason = "failed", f"agent: timed out after timeout_s={task.timeout_s:g}"
        except asyncio.CancelledError:
            reason = self.gate.stale_reason(trajectory_id) if self.gate else None
            current = asyncio.current_task()
            if reason is None or current is None or current.uncancel() > 0:
                raise  # cancelled from outside (redundant extra / shutdown)
            traj.status, traj.reason = "aborted", reason
        except Exception as e:  # noqa: BLE001 - the agent's error fails this one trajectory
            traj.status, traj.reason = "failed", f"agent: {type(e).__name__}: {e}"
        finally:
            traj.timings["total"] = time.perf_counter() - started
            traj.timings["generate"] = traj.timings["total"]
            self.gateway.end(session, traj.status)
            if self.gate is not None:
                self.gate.untrack(trajectory_id)
            release = getattr(self.gateway.proxy, "release", None)
            if release is not None:
                release(trajectory_id)
        return traj

    def _reward(self, task: AgentTask, session: AgentSession, instance: AgentInstance,
                returned: Any) -> tuple[float, bool]:
        if isinstance(returned, dict) and "reward" in returned:
            reward = float(returned["reward"])
            return reward, bool(returned.get("success", reward > 0))
        if returned is None:
            if task.reward_fn is None:
                raise ValueError(f"agent task {task.name!r}: the agent returned no reward and the task has no "
                                 "reward_fn; return a number or set AgentTask(reward_fn=...)")
            texts = [session.chat.action_text(c.completion_ids) for c in session.calls]
            reward = float(task.reward_fn(AgentResult(instance, list(session.calls), texts)))
            return reward, reward > 0
        if isinstance(returned, bool) or not isinstance(returned, (int, float)):
            raise TypeError(f"the agent returned {returned!r}; return a number, a dict with 'reward', or None")
        return float(returned), returned > 0


class TaskRunner:
    """What the scheduler drives when a run has agent tasks: env tasks go to the EnvManager, agent tasks to the
    AgentRunner (the same ``run`` and ``pool`` the scheduler uses)."""

    def __init__(self, envs: Any, agents: AgentRunner) -> None:
        self.envs, self.agents = envs, agents
        self.pool = envs.pool

    async def run(self, task: Any, trajectory_id: str, group_id: str, seed: int | None) -> Trajectory:
        runner = self.agents if isinstance(task, AgentTask) else self.envs
        return await runner.run(task, trajectory_id, group_id, seed)


def has_agents(tasks: list[Any]) -> bool:
    return any(isinstance(t, AgentTask) for t in tasks)


async def start_gateway(proxy: Any, tokenizer: Any, tasks: list[Any]) -> Gateway | None:
    """The run's gateway (TCP on 127.0.0.1 and a unix socket for sandboxed agents) if it has agent tasks."""
    if not has_agents(tasks):
        return None
    return await Gateway(proxy, tokenizer, unix_socket=True).start()
