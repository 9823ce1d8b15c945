"""The faults, each measured on its own short real run (see :mod:`rollart.faults.harness`).

Every function injects one fault for real — exceptions and hangs inside the env, ``kill -9`` of an actor
process, faults inside the serverless reward endpoint, a truncated checkpoint file, malformed frames on the
run's actor socket — and returns the figure(s) it measured. A run that ends early reads as a failure of
what it was measuring, with the run's own error in the detail; nothing is assumed.
"""
from __future__ import annotations

import asyncio
import dataclasses
import socket
import sys
import time
from pathlib import Path
from typing import Callable

from rollart.faults.figures import Figure, failed, not_available
from rollart.faults.harness import Harness, Outcome
from rollart.faults.procs import actor_processes, find_actor, kill9
from rollart.faults.rewards import ScoreBook

ENV_FAIL_PROB = 0.10
"""Share of env calls (reset is spared, every step) that raise."""
ENV_HANG_PROB = 0.01
"""Share of env calls that hang (far longer than the env host's timeout)."""
ENV_TIMEOUT_S = 2.0
"""The env host's step timeout in the env runs: a hang is caught after this long."""
REWARD_FAULT_RATE = 0.30
"""Share of reward-endpoint calls given a fault (the endpoint's own injector: raise, crash or hang)."""
FRAMES = 10_000
"""Malformed frames sent to the run's actor socket."""


def _ended(outcome: Outcome) -> str:
    return outcome.error or "the run ended early"


def _steps(outcome: Outcome, total: int) -> str:
    return f"{outcome.steps}/{total} steps"


# ---------------------------------------------------------------------------------------------- env
async def env_faults(h: Harness, exc: bool, hang: bool) -> list[Figure]:
    """10% of env calls raise, 1% hang (either or both, in one run): every failure must end its trajectory
    with a reason and nothing accepted may vanish (env_exc_lost); no hang may hold its trajectory past the env
    timeout (env_hang_deadlocks: 1 for a run stalled by them, else the env sessions never released)."""
    from rollart.rollout.env_client import EnvPool
    from rollart.rollout.env_host import EnvHostConfig

    faults = {**({"fail_prob": ENV_FAIL_PROB} if exc else {}),
              **({"hang_prob": ENV_HANG_PROB, "hang_seconds": 600.0} if hang else {})}
    name = "env_exc_hang" if exc and hang else "env_exc" if exc else "env_hang"
    # a failing env fails most 12-turn episodes: more replacements keep groups completable (a public setting)
    cfg = h.config(name, rollout={"max_replacements": 48, "max_failed_groups": 64})
    task = dataclasses.replace(h.task, faults=faults)
    pool = EnvPool.inprocess(EnvHostConfig(step_timeout_s=ENV_TIMEOUT_S, reset_timeout_s=ENV_TIMEOUT_S))
    out = await h.drive(cfg, env_pool=pool, task=task)
    raised = out.reason_count("InjectedEnvError")
    hung = out.reason_count("timed out", "hung")
    leaked = pool.counters["opened"] - pool.counters["released"]
    launched = out.scheduler.get("launched", 0)
    both = " (in one run with the other env fault)" if exc and hang else ""
    figures = []
    if exc:
        what = (f"{ENV_FAIL_PROB:.0%} of env steps raised{both}: {raised} of {launched} trajectories failed with "
                f"the reason; {_steps(out, cfg.total_steps)}")
        if not out.completed:
            figures.append(failed("env_exc_lost", _ended(out), f"{what}; {_ended(out)}", out.seconds))
        elif raised == 0:
            figures.append(not_available("env_exc_lost", f"no injected exception reached a trajectory; {what}",
                                         out.seconds))
        else:
            a = out.accounts
            figures.append(Figure("env_exc_lost", str(a.lost), a.lost == 0 and not a.overcounted,
                                  f"{what}; {a.describe()}", out.seconds, {"raised": raised, "lost": a.lost}))
    if hang:
        what = (f"{ENV_HANG_PROB:.0%} of env steps hung for 600 s{both}: {hung} caught by the {ENV_TIMEOUT_S:g} s "
                f"env timeout; {leaked} env sessions never released; {_steps(out, cfg.total_steps)}")
        if out.stalled:
            figures.append(Figure("env_hang_deadlocks", "1", False, f"{what}; {out.error}", out.seconds,
                                  {"caught": hung, "leaked": leaked}))
        elif not out.completed:
            figures.append(failed("env_hang_deadlocks", _ended(out), f"{what}; {_ended(out)}", out.seconds))
        elif hung == 0:
            figures.append(not_available("env_hang_deadlocks", f"no injected hang reached a trajectory; {what}",
                                         out.seconds))
        else:
            figures.append(Figure("env_hang_deadlocks", str(leaked), leaked == 0, what, out.seconds,
                                  {"caught": hung, "leaked": leaked}))
    return figures


# ---------------------------------------------------------------------------------------------- kills
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
                       f"{_ended(out) if not out.completed else ''}", out.seconds)]
    if not out.completed:
        return [failed("inference_kill_lost", _ended(out), f"{events}; {_steps(out, cfg.total_steps)}; "
                       f"{_ended(out)}", out.seconds)]
    a = out.accounts
    return [Figure("inference_kill_lost", str(a.lost), a.lost == 0 and not a.overcounted,
                   f"{events}; {_steps(out, cfg.total_steps)}; {a.describe()}", out.seconds, {"lost": a.lost})]


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


def _resumed(name: str, cfg, out: Outcome, killed: list, trainer: bool) -> Figure:
    events = "; ".join(out.events) or "the run never reached the kill step"
    if not killed:
        return failed(name, "nothing was killed", f"{events}; {_ended(out) if not out.completed else ''}",
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
    how = f"{events}; {_steps(out, cfg.total_steps)}"
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


# ---------------------------------------------------------------------------------------------- rewards
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def reward_faults(h: Harness) -> list[Figure]:
    """Rewards through the real serverless endpoint (``python -m rollart.rewards.serve``) with 30% of its
    calls faulted (raise / crash the worker / hang past the call timeout); the client retries. Unscored:
    trained trajectories without the endpoint's score, plus accepted ones lost."""
    import aiohttp

    from rollart.rewards.client import ClientConfig, RewardClient

    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rollart.rewards.serve", "--port", str(port), "--fault-rate", str(REWARD_FAULT_RATE),
        "--fault-seed", "0", "--call-timeout", "2", "--max-workers", "2", "--idle-timeout", "10",
        "--functions", "rollart.faults.rewards:episode_reward", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        try:
            banner = await asyncio.wait_for(server.stdout.readline(), 120)
        except TimeoutError:
            banner = b""
        if b"reward endpoint on" not in banner:
            return [failed("reward_faults_unscored", "the reward endpoint did not start",
                           f"python -m rollart.rewards.serve printed {banner[:200]!r}", time.monotonic() - started)]
        async with aiohttp.ClientSession() as http:  # the socket binds just after the banner
            for _ in range(100):
                try:
                    async with http.get(f"{url}/health") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
        client = RewardClient(url, config=ClientConfig(retries=4, backoff=0.05, max_backoff=1.0, timeout=30.0),
                              seed=0)
        book = ScoreBook(client)
        try:
            out = await h.drive(h.config("reward_faults"), scores=book)
        finally:
            await client.close()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/stats") as r:
                stats = await r.json()
    finally:
        if server.returncode is None:
            server.terminate()
            try:
                await asyncio.wait_for(server.wait(), 30)
            except TimeoutError:
                server.kill()
                await server.wait()
    what = (f"{REWARD_FAULT_RATE:.0%} of endpoint calls faulted: {stats.get('failed', 0)} of {stats.get('calls', 0)} "
            f"calls failed, {stats.get('spawned', 0)} worker processes started; client attempts {client.attempts} "
            f"for {len(book.scores)} scores; {book.failures} trajectories failed after every retry (dropped with the "
            f"reason)")
    if not out.completed:
        return [failed("reward_faults_unscored", _ended(out), f"{what}; {_ended(out)}", out.seconds)]
    if not stats.get("failed"):
        return [not_available("reward_faults_unscored", f"no endpoint call failed; {what}", out.seconds)]
    a = out.accounts
    value = a.unscored + a.lost
    return [Figure("reward_faults_unscored", str(value), value == 0 and not a.overcounted,
                   f"{what}; trained without the endpoint's score {a.unscored} + lost {a.lost}; {a.describe()}",
                   out.seconds, {"unscored": a.unscored, "lost": a.lost, "endpoint": stats})]


# ---------------------------------------------------------------------------------------------- checkpoints
async def corrupt_ckpt(h: Harness) -> list[Figure]:
    """Train 4 steps (checkpoints at steps 2 and 4), cut the newest checkpoint's largest file in half (the
    optimizer state, for the tiny model; any file of a checkpoint must be verified), then ``--resume`` to 6
    steps: fallback=1 when the run resumes from the intact step-2 checkpoint and trains 4 steps."""
    base_steps, total = 4, h.steps
    first = await h.drive(h.config("corrupt_ckpt", total_steps=base_steps))
    root = h.workdir / "corrupt_ckpt" / "checkpoints"
    ckpts = sorted(p for p in root.glob("step_*") if p.is_dir())
    if not first.completed or len(ckpts) < 2:
        return [failed("corrupt_ckpt_fallback", "the base run left no two checkpoints",
                       f"base run: {_steps(first, base_steps)}, checkpoints {[p.name for p in ckpts]}; "
                       f"{first.error}", first.seconds)]
    newest, older = ckpts[-1], ckpts[-2]
    victim = max((p for p in newest.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    size = victim.stat().st_size
    with open(victim, "r+b") as f:
        f.truncate(size // 2)
    older_step = int(older.name.split("_")[1])
    out = await h.drive(h.config("corrupt_ckpt", fresh=False, resume=True, total_steps=total))
    trained = len(out.result.history) if out.completed else None
    what = (f"truncated {victim.relative_to(root)} ({size} -> {size // 2} bytes), then --resume to {total} steps; "
            f"the intact {older.name} is beside it")
    seconds = first.seconds + out.seconds
    if not out.completed:
        return [Figure("corrupt_ckpt_fallback", "0", False, f"{what}; the resume ended: {_ended(out)}", seconds)]
    if trained != total - older_step:
        return [Figure("corrupt_ckpt_fallback", "0", False, f"{what}; it trained {trained} steps, not the "
                       f"{total - older_step} of a resume from {older.name}: it did not fall back", seconds)]
    return [Figure("corrupt_ckpt_fallback", "1", True, f"{what}; resumed from {older.name} and trained {trained} "
                   f"steps to version {out.result.version}", seconds)]


# ---------------------------------------------------------------------------------------------- frames
async def malformed_frames(h: Harness) -> list[Figure]:
    """10,000 malformed frames from a rogue peer on the run's actor socket at step 1: survived=N when the run
    took all N and still trained every step after them."""
    cfg = h.config("malformed_frames")
    state: dict = {"sent": 0, "done": False, "step_done": None}

    async def start_flood(coordinator) -> str:
        procs = actor_processes()
        endpoint = next((p.endpoint for p in procs if p.endpoint), "")
        if not endpoint:
            raise RuntimeError("no actor process shows the coordinator's endpoint")
        flood = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rollart.faults.frames", endpoint, "--count", str(FRAMES), "--seed", "0",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)

        async def follow() -> None:
            async for line in flood.stdout:
                word, _, n = line.decode().partition(" ")
                state["sent"] = int(n or 0)
                if word == "done":
                    state["done"] = True
                    state["step_done"] = coordinator.step
            await flood.wait()

        state["task"] = asyncio.create_task(follow())
        state["proc"] = flood
        return f"rogue peer sends {FRAMES} malformed frames to {endpoint}"

    out = await h.drive(cfg, hooks=[(1, start_flood)])
    if "task" in state:
        try:
            await asyncio.wait_for(state["task"], 60)
        except TimeoutError:
            state["proc"].kill()
            await state["proc"].wait()
    sent = state["sent"]
    rejected = f"; the coordinator counted {out.system_rejected} rejected frames" \
        if out.system_rejected is not None else ""
    what = f"{'; '.join(out.events) or 'the flood never started'}; {sent} sent{rejected}; {_steps(out, cfg.total_steps)}"
    if not state["done"]:
        return [failed("malformed_frames_survived", "the flood did not complete" if out.completed else _ended(out),
                       f"{what}; {out.error}", out.seconds)]
    if not out.completed:
        return [failed("malformed_frames_survived", _ended(out), f"{what}; {_ended(out)}", out.seconds)]
    after = out.steps - (state["step_done"] or 0)
    if after < 1:
        return [failed("malformed_frames_survived", "no step trained after the flood", what, out.seconds)]
    return [Figure("malformed_frames_survived", str(sent), sent == FRAMES,
                   f"{what}; {after} steps trained after the last frame", out.seconds, {"sent": sent})]


# ---------------------------------------------------------------------------------------------- sandbox
async def sandbox(workdir: Path, quick: bool) -> list[Figure]:
    """The project's hostile-command suite in every isolation mode this machine runs."""
    from rollart.faults.sandbox_suite import QUICK_CASES, find_suite, run_suite

    started = time.monotonic()
    suite = find_suite()
    if suite is None:
        return [not_available("sandbox_contained", "tests/sandbox/test_security.py not found: run from a checkout")]
    report, why = await run_suite(suite, workdir / "sandbox-junit.xml", quick, timeout_s=600.0)
    seconds = time.monotonic() - started
    if report is None:
        return [failed("sandbox_contained", why, why, seconds)]
    subset = f"the {len(QUICK_CASES)} --quick cases" if quick else "every case"
    if report.total == 0:
        return [not_available("sandbox_contained", f"no isolation mode ran: {report.describe()}", seconds)]
    contained = sum(report.contained.values())
    return [Figure("sandbox_contained", f"{contained}/{report.total}", contained == report.total,
                   f"{subset} of {suite.relative_to(suite.parents[2])} per mode: {report.describe()}", seconds,
                   {"contained": contained, "total": report.total})]
