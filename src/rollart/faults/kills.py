"""The process kills: ``kill -9`` of one actor process of a short real run (the inference worker, the trainer, the
weight store, the env host) at a given step. The run must finish every step and lose nothing accepted; a killed
trainer must be replaced by a new process that resumes from the last checkpoint; a killed env host must be
restarted, the trajectories it held failing with the reason and replaced, so that their groups still complete."""
from __future__ import annotations

import asyncio
from typing import Callable

from rollart.faults.figures import Figure, ended, failed, steps_done
from rollart.faults.harness import Harness, Outcome
from rollart.faults.procs import actor_processes, find_actor, kill9


def _killer(class_name: str, killed: list) -> Callable:
    def kill(coordinator) -> str:
        proc = find_actor(class_name)
        if proc is None:
            names = [p.cls.rsplit(":", 1)[-1] for p in actor_processes()]
            raise RuntimeError(f"no live {class_name} process among this run's actors {names}")
        kill9(proc)
        killed.append(proc)
        return f"kill -9 {proc.name} (pid {proc.pid})"
    return kill


def _who_now(class_name: str, seen: list) -> Callable:
    def look(coordinator) -> str:
        proc = find_actor(class_name)
        seen.append(proc)
        return f"{class_name} now: " + (f"pid {proc.pid}" if proc else "no live process")
    return look


async def inference_kill(h: Harness) -> list[Figure]:
    """kill -9 the inference worker at step 2: the run must finish and lose nothing accepted."""
    cfg = h.config("inference_kill")
    killed, after = [], []
    out = await h.drive(cfg, hooks=[(2, _killer("InferenceWorker", killed)),
                                    (3, _who_now("InferenceWorker", after))])
    events = "; ".join(out.events)
    if not killed:
        return [failed("inference_kill_lost", "nothing was killed", f"{events or 'the run never reached step 2'}; "
                       f"{ended(out) if not out.completed else ''}", out.seconds)]
    if not out.completed:
        return [failed("inference_kill_lost", ended(out), f"{events}; {steps_done(out, cfg.total_steps)}; "
                       f"{ended(out)}", out.seconds)]
    a = out.accounts
    return [Figure("inference_kill_lost", str(a.lost), a.lost == 0 and not a.overcounted,
                   f"{events}; {steps_done(out, cfg.total_steps)}; {a.describe()}", out.seconds, {"lost": a.lost})]


async def trainer_kill(h: Harness) -> list[Figure]:
    """kill -9 the trainer at step 3 (a checkpoint was saved at step 2): resumed=1 when the run still trains
    every step, on a new trainer process."""
    cfg = h.config("trainer_kill")
    killed: list = []
    out = await h.drive(cfg, hooks=[(3, _killer("TrainerActor", killed))])
    return [_resumed("trainer_kill_resumed", cfg, out, killed, trainer=True)]


async def store_kill(h: Harness) -> list[Figure]:
    """kill -9 the weight store at step 2: resumed=1 when the run still trains and publishes every step."""
    cfg = h.config("store_kill")
    killed, after = [], []
    out = await h.drive(cfg, hooks=[(2, _killer("WeightStore", killed)), (3, _who_now("WeightStore", after))])
    return [_resumed("store_kill_resumed", cfg, out, killed, trainer=False)]


HOST_LOSS = ("ActorDeadError", "no env ")
"""What a trajectory's failure reason says when its env host died under it: a reset, step or create that the dead
process never answered, or a step the restarted process cannot take (it no longer holds the env)."""


async def env_host_kill(h: Harness) -> list[Figure]:
    """kill -9 the env host at step 1, once envs are live on it: lost=0 when the host was restarted, the
    trajectories it held failed with the reason and were replaced (or new ones waited for the restart), no group
    failed, and every step trained."""
    cfg = h.config("env_host_kill", env_hosts=1)
    killed, after, pool = [], [], {}
    kill = _killer("EnvHost", killed)

    async def kill_busy_host(coordinator) -> str:
        from rollart.messages import GetStats

        pool["pool"] = coordinator.parts.actors.env_pool
        host = pool["pool"].host_objects[0]
        live = 0
        for _ in range(100):  # a host holding envs: their trajectories are cut mid-episode
            live = (await host.send(GetStats(), timeout=10.0))["live_envs"]
            if live:
                break
            await asyncio.sleep(0.05)
        return f"{kill(coordinator)} holding {live} live envs"

    out = await h.drive(cfg, hooks=[(1, kill_busy_host), (2, _who_now("EnvHost", after))])
    events = "; ".join(out.events)
    if not killed:
        return [failed("env_host_kill_lost", "nothing was killed", f"{events or 'the run never reached step 1'}; "
                       f"{ended(out) if not out.completed else ''}", out.seconds)]
    hit = out.reason_count(*HOST_LOSS)
    waited = pool["pool"].counters["open_retries"] if "pool" in pool else 0
    sched = out.scheduler
    groups = (f"{sched.get('groups_complete', 0)} groups complete, {sched.get('groups_failed', 0)} failed, "
              f"{sched.get('replaced', 0)} trajectories replaced")
    what = (f"{events}; {hit} trajectories failed with their host's death as the reason, {waited} env opens waited "
            f"for the restart; {groups}; {steps_done(out, cfg.total_steps)}")
    if not out.completed:
        return [failed("env_host_kill_lost", ended(out), f"{what}; {ended(out)}", out.seconds)]
    a = out.accounts
    checks = {"a new env host process": bool(after) and after[0] is not None and after[0].pid != killed[0].pid,
              "trajectories failed with the host's death as the reason, or waited for the restart": hit + waited > 0,
              "no group failed": sched.get("groups_failed", 0) == 0}
    missing = [c for c, ok in checks.items() if not ok]
    detail = f"{what}; {a.describe()}" + (f"; not shown: {', '.join(missing)}" if missing else "")
    return [Figure("env_host_kill_lost", str(a.lost), a.lost == 0 and not a.overcounted and not missing, detail,
                   out.seconds, {"lost": a.lost, "hit": hit, "waited": waited, "missing": missing})]


def _resumed(name: str, cfg, out: Outcome, killed: list, trainer: bool) -> Figure:
    events = "; ".join(out.events) or "the run never reached the kill step"
    if not killed:
        return failed(name, "nothing was killed", f"{events}; {ended(out) if not out.completed else ''}",
                      out.seconds)
    a = out.accounts
    version = getattr(out.result, "version", None)
    checks = {"every step trained": out.completed and out.steps >= cfg.total_steps,
              f"final version {cfg.total_steps}": version == cfg.total_steps}
    if trainer:
        dead = killed[0].pid
        checks["a new trainer process trained after the kill"] = any(
            r.get("event") == "train" and r.get("pid") != dead for r in out.ledger[_index_of(out.ledger, dead):])
    missing = [c for c, ok in checks.items() if not ok]
    how = f"{events}; {steps_done(out, cfg.total_steps)}"
    if trainer:
        how += f"; trainer pids {a.trainer_pids}; {a.rolled_back} trained trajectories rolled back to a checkpoint"
    how += f"; {a.describe()}"
    if missing:
        return Figure(name, "0", False, f"{how}; not shown: {', '.join(missing)}"
                      + (f"; the run ended: {out.error}" if out.error else ""), out.seconds,
                      {"lost": a.lost, "missing": missing})
    return Figure(name, "1", a.lost == 0, how, out.seconds, {"lost": a.lost, "missing": []})


def _index_of(ledger: list[dict], pid: int) -> int:
    """Position of the first ledger record written by ``pid`` (0 if none)."""
    return next((i for i, r in enumerate(ledger) if r.get("pid") == pid), 0)
