"""The hung peers: ``SIGSTOP`` of one process per role during a short real run — the trainer, the weight store, the
inference worker, the env host (actor processes) and the reward endpoint (``python -m rollart.rewards.serve``).

A stopped process keeps its sockets open: connections are taken and nothing is ever answered, the hang that a
bounded wait has to end. The run must either recover (the actor runtime notices the silent process by its
heartbeats, kills and restarts it; requests go again) or end in one line naming what it waited for (the reward
endpoint, which nothing restarts), and never stall. Each role reads ``hung_peer_<role>=recovered`` (every step
trained, the stopped peer noticed: restarted, or its calls failed), ``failed_clean`` (the run ended with its
error) or ``hang`` (the harness's watchdog saw no step for ``STALL_S``: a wait with no bound); ``n/a`` when the run
ended before it waited on the stopped peer at all.
"""
from __future__ import annotations

import dataclasses
import os
import signal
from typing import Any, Callable

from rollart.faults.figures import Figure, failed, not_available, steps_done
from rollart.faults.procs import find_actor

ROLES = {"trainer": "TrainerActor", "weight_store": "WeightStore", "inference_worker": "InferenceWorker",
         "env_host": "EnvHost", "reward_endpoint": ""}
"""Role -> the actor class whose process is stopped ("" : the reward endpoint, a process of its own)."""
HUNG_PEER_FIGURES = {f"hung_peer_{role}": "hung_peer" for role in ROLES}
"""Figure -> fault, for the suite's list."""

STOP_AT = 1
"""The step at which the peer is stopped: early, so that the rest of a short run needs it."""
HEARTBEAT_S = 8.0
"""heartbeat_timeout_s of these runs: how long a stopped actor process goes unnoticed."""
ATTEMPT_S = 2.0
"""The reward client's attempt timeout (reward.attempt_timeout_s) in the reward-endpoint run."""
STALL_S = 120.0
"""No training step for this long counts as a hang."""
MAX_CONCURRENCY = 16
"""One step's trajectories in flight at a time (2 groups of 8), so that the steps after ``STOP_AT`` still need
every peer (with more, a short run may have played and scored all it trains before the stop)."""


def _stopper(pid_of: Callable[[], int | None], what: str, stopped: list) -> Callable:
    """A hook that stops the process; ``stopped`` gets its pid and the run's Coordinator."""
    def stop(coordinator: Any) -> str:
        pid = pid_of()
        if pid is None:
            raise RuntimeError(f"no live {what} process to stop")
        os.kill(pid, signal.SIGSTOP)
        stopped.append((pid, coordinator))
        return f"SIGSTOP {what} (pid {pid})"
    return stop


def _restarts(role: str, coordinator: Any) -> int:
    """Times the run's actor runtime restarted the role's actors (it noticed the stopped one and replaced it)."""
    actors = coordinator.parts.actors if coordinator.parts is not None else None
    if actors is None:
        return 0
    if role == "trainer":
        return actors.trainer.restarts
    if role == "weight_store":
        return actors.store.restarts
    if role == "inference_worker":
        return sum(w.handle.restarts for w in actors.workers)
    return sum(handle.restarts for _, handle in actors.env_pool.hosts) if actors.env_pool is not None else 0


def _config(h: Any, name: str, **rollout: Any) -> Any:
    cfg = h.config(name, heartbeat_timeout_s=HEARTBEAT_S, rollout=rollout)
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, max_concurrency=MAX_CONCURRENCY))


def _actor_pid(class_name: str) -> Callable[[], int | None]:
    def pid() -> int | None:
        proc = find_actor(class_name)
        return proc.pid if proc is not None else None
    return pid


def _release(pid: int) -> bool:
    """SIGKILL a stopped process the run left behind (it would never run again); True if there was one."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state not in ("T", "t"):
        return False
    os.kill(pid, signal.SIGKILL)
    return True


async def hung_peer(h: Any) -> list[Figure]:
    """Each role in turn: its process stopped at step ``STOP_AT`` of its own short run."""
    from rollart.faults.harness import Harness

    watched = Harness(h.workdir, h.recipe_name, steps=h.steps, stall_s=STALL_S, deadline_s=h.deadline_s)
    figures = []
    for role, class_name in ROLES.items():
        name = f"hung_peer_{role}"
        if h.steps <= STOP_AT:
            figures.append(failed(name, f"a run of {h.steps} steps ends before step {STOP_AT}"))
            continue
        try:
            figures.append(await (_reward_endpoint(watched) if not class_name else _actor(watched, role, class_name)))
        except Exception as e:  # noqa: BLE001 - one role the suite could not run must not hide the others
            figures.append(failed(name, f"suite error: {type(e).__name__}: {e}"))
    return figures


async def _actor(h: Any, role: str, class_name: str) -> Figure:
    cfg = _config(h, f"hung_peer_{role}")
    stopped: list[int] = []
    after: list[str] = []

    def look(coordinator: Any) -> str:
        proc = find_actor(class_name)
        after.append(f"pid {proc.pid}" if proc is not None else "none")
        return f"{class_name} now: {after[-1]}"

    out = await h.drive(cfg, hooks=[(STOP_AT, _stopper(_actor_pid(class_name), class_name, stopped)),
                                    (STOP_AT + 1, look)])
    left = [pid for pid, _ in stopped if _release(pid)]
    restarts = _restarts(role, stopped[0][1]) if stopped else 0
    return _figure(f"hung_peer_{role}", cfg, out, stopped, restarts,
                   f"heartbeat_timeout_s={HEARTBEAT_S:g}; restarted {restarts} time{'s' * (restarts != 1)}"
                   + (f"; the stopped process was still there at the end (killed now: {left})" if left else ""))


async def _reward_endpoint(h: Any) -> Figure:
    from rollart.faults.rewards import ScoreBook
    from rollart.rewards.client import ClientConfig, RewardClient
    from rollart.rewards.config import RewardConfig
    from rollart.rewards.local import LocalEndpoint

    endpoint = LocalEndpoint(RewardConfig(serverless=True, function="episode_reward", max_workers=2,
                                          functions=("rollart.faults.rewards:episode_reward",)))
    url = await endpoint.start()
    client = RewardClient(url, config=ClientConfig(retries=1, backoff=0.05, max_backoff=0.5, timeout=ATTEMPT_S),
                          seed=0)
    # nothing restarts the endpoint: every group fails from then on, and the run ends after a few of them
    cfg = _config(h, "hung_peer_reward_endpoint", max_replacements=0, max_failed_groups=2)
    stopped: list = []
    book = ScoreBook(client)
    try:
        out = await h.drive(cfg, scores=book,
                            hooks=[(STOP_AT, _stopper(lambda: endpoint.proc.pid, "the reward endpoint", stopped))])
    finally:
        await client.close()
        if endpoint.running:
            os.kill(endpoint.proc.pid, signal.SIGCONT)  # so that it stops its worker processes as it exits
        await endpoint.stop()
    return _figure("hung_peer_reward_endpoint", cfg, out, stopped, book.failures,
                   f"reward attempts bounded at {ATTEMPT_S:g} s; {book.failures} trajectories' rewards failed")


def _figure(name: str, cfg: Any, out: Any, stopped: list, noticed: int, bound: str) -> Figure:
    """``noticed``: evidence that the run waited on the stopped peer (its restarts, its failed calls)."""
    events = "; ".join(out.events) or f"the run never reached step {STOP_AT}"
    how = f"{events}; {bound}; {steps_done(out, cfg.total_steps)}"
    if not stopped:
        return failed(name, "nothing was stopped", f"{how}; {out.error or 'the run ended'}", out.seconds)
    if out.stalled:
        return Figure(name, "hang", False, f"{how}; {out.error}", out.seconds)
    if out.completed and not noticed:
        return not_available(name, f"the run ended before it waited on the stopped process; {how}", out.seconds)
    if out.completed:
        accounts = f"; {out.accounts.describe()}" if out.accounts is not None else ""
        return Figure(name, "recovered", True, f"{how}{accounts}", out.seconds)
    return Figure(name, "failed_clean", True, f"{how}; the run ended: {out.error}", out.seconds)
