"""``python -m rollart.faults``: the fault suite against short real runs of the FrozenLake quickstart's pipeline.

    python -m rollart.faults                       # every fault (a few minutes on 2 cores)
    python -m rollart.faults --quick               # < 60 s: env exceptions + hangs (one 3-step run) and 6
                                                   # hostile commands per sandbox mode
    python -m rollart.faults --only trainer_kill   # one fault (or a figure name; repeat or comma-separate)
    python -m rollart.faults --soak 3600           # one quickstart-sized run for an hour, a random fault about
                                                   # every minute (--fault-every, --seed; rollart.faults.soak)

Prints one line per figure as it is measured (ok / FAIL / n/a, the value, its run time and what was counted),
then the wall time and load, and last the summary line ``env_exc_lost=0 env_hang_deadlocks=0 ...``. A value is
a count or ratio, ``fail(why)`` when the run a fault needs ended early, ``n/a(why)`` when this machine or
checkout lacks what it needs. Runs, the trainers' ledgers, and everything the actor processes print go under
``--workdir`` (``faults.log``). Exit status 0 when every figure reads as a fault-tolerant system's, else 1.

Faults (each on its own run of 6 steps of 2 GRPO groups of 8, tiny model, CPU):
  env_exc           10% of env steps raise               -> env_exc_lost: accepted trajectories unaccounted
  env_hang          1% of env steps hang for 600 s       -> env_hang_deadlocks: run stalled (1) / envs never released
                    (env_exc and env_hang share one run when both are selected)
  inference_kill    kill -9 the inference worker, step 2 -> inference_kill_lost
  env_host_kill     kill -9 the env host, step 1         -> env_host_kill_lost: accepted trajectories unaccounted
                                                            (the host restarts, its trajectories fail and are replaced)
  trainer_kill      kill -9 the trainer, step 3          -> trainer_kill_resumed: 1 if every step still trained
  store_kill        kill -9 the weight store, step 2     -> store_kill_resumed
  reward_faults     30% of serverless reward calls fail  -> reward_faults_unscored: trained without the endpoint's
                                                            score, or lost
  corrupt_ckpt      newest checkpoint's largest file cut in half, then --resume -> corrupt_ckpt_fallback: 1 if
                                                            resumed from the intact older checkpoint
  disk_full_ckpt    the checkpoint disk fills up between two checkpoints, then frees -> disk_full_ckpt_survived: 1 if
                                                            the write failed cleanly and training went on
  malformed_frames  10,000 malformed frames on the run's actor socket -> malformed_frames_survived, and
                                                            malformed_frames_uncounted: sent - rejected - accepted
  sandbox           tests/sandbox hostile-command suite  -> sandbox_contained: contained / run, every mode here
  hung_peer         SIGSTOP the trainer, weight store, inference worker, env host or reward endpoint, step 2 (a run
                    each) -> hung_peer_<role>: recovered / failed_clean (ended in one line) / hang
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from rollart.faults.figures import Figure, failed, summary
from rollart.faults.hung_peers import HUNG_PEER_FIGURES

FAULTS = ("env_exc", "env_hang", "inference_kill", "trainer_kill", "store_kill", "reward_faults", "corrupt_ckpt",
          "malformed_frames", "env_host_kill", "disk_full_ckpt", "hung_peer", "sandbox")
FIGURES = {"env_exc_lost": "env_exc", "env_hang_deadlocks": "env_hang", "inference_kill_lost": "inference_kill",
           "trainer_kill_resumed": "trainer_kill", "store_kill_resumed": "store_kill",
           "reward_faults_unscored": "reward_faults", "corrupt_ckpt_fallback": "corrupt_ckpt",
           "malformed_frames_survived": "malformed_frames", "sandbox_contained": "sandbox",
           "malformed_frames_uncounted": "malformed_frames", "env_host_kill_lost": "env_host_kill",
           "disk_full_ckpt_survived": "disk_full_ckpt", **HUNG_PEER_FIGURES}
QUICK = ("env_exc", "env_hang", "sandbox")
QUICK_STEPS = 3


def select(only: list[str], quick: bool) -> list[str]:
    """The faults to run, in suite order; an unknown name stops with one line listing the known ones."""
    if not only:
        return list(QUICK if quick else FAULTS)
    chosen = set()
    for item in (n.strip() for arg in only for n in arg.split(",")):
        if not item:
            continue
        fault = FIGURES.get(item, item)
        if fault not in FAULTS:
            raise SystemExit(f"error: --only {item}: no such fault; choose from {', '.join(FAULTS)} "
                             "(or a figure name such as env_exc_lost)")
        chosen.add(fault)
    return [f for f in FAULTS if f in chosen]


@contextlib.contextmanager
def stderr_to(path: Path):
    """Send this process's stderr — and so every actor process's, which inherit it — to ``path``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "a") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


async def _measure(names: list[str], coro) -> list[Figure]:
    """The figures of one fault; an error of the suite itself reads as a failure of those figures."""
    try:
        return await coro
    except Exception as e:  # noqa: BLE001 - one broken fault must not hide the others' figures
        why = f"suite error: {type(e).__name__}: {e}"
        return [failed(figure, why) for figure, fault in FIGURES.items() if fault in names]


async def run_suite(faults: list[str], workdir: Path, recipe: str, quick: bool,
                    emit=print) -> list[Figure]:
    from rollart.faults import sandbox_suite
    from rollart.faults.corrupt_ckpt import corrupt_ckpt
    from rollart.faults.disk_full import disk_full_ckpt
    from rollart.faults.env_failures import env_faults
    from rollart.faults.harness import Harness
    from rollart.faults.hung_peers import hung_peer
    from rollart.faults.kills import env_host_kill, inference_kill, store_kill, trainer_kill
    from rollart.faults.malformed_frames import malformed_frames
    from rollart.faults.reward_faults import reward_faults

    figures: list[Figure] = []
    sandbox = (asyncio.create_task(_measure(["sandbox"], sandbox_suite.sandbox(workdir, quick)))  # mostly waits:
               if "sandbox" in faults else None)                                                  # beside the runs
    runs = [f for f in faults if f != "sandbox"]
    try:
        if runs:
            harness = Harness(workdir, recipe, steps=QUICK_STEPS if quick else 6)
            steps = {"inference_kill": inference_kill, "trainer_kill": trainer_kill, "store_kill": store_kill,
                     "reward_faults": reward_faults, "corrupt_ckpt": corrupt_ckpt, "malformed_frames": malformed_frames}
            steps.update(env_host_kill=env_host_kill, disk_full_ckpt=disk_full_ckpt)
            steps.update(hung_peer=hung_peer)
            env = [f for f in ("env_exc", "env_hang") if f in runs]
            measured = [(env, env_faults(harness, exc="env_exc" in env, hang="env_hang" in env))] if env else []
            measured += [([name], steps[name](harness)) for name in runs if name in steps]
            for names, coro in measured:
                for fig in await _measure(names, coro):
                    figures.append(fig)
                    emit(fig.line())
        if sandbox is not None:
            for fig in await sandbox:
                figures.append(fig)
                emit(fig.line())
    finally:
        if sandbox is not None and not sandbox.done():
            sandbox.cancel()
    return figures


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m rollart.faults", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--quick", action="store_true", help=f"the < 60 s subset: {', '.join(QUICK)}")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these faults")
    p.add_argument("--workdir", default="runs/faults", help="runs, ledgers and faults.log (default runs/faults)")
    p.add_argument("--recipe", default="recipes.grpo_frozenlake",
                   help="module with default_config() and TASK whose pipeline the runs use")
    p.add_argument("--soak", type=float, metavar="SECONDS",
                   help="one run of the recipe for SECONDS under a random fault about every --fault-every seconds "
                        "(rollart.faults.soak)")
    p.add_argument("--fault-every", type=float, default=60.0, metavar="SECONDS", help="with --soak (default 60)")
    p.add_argument("--seed", type=int, default=0, help="with --soak: the draw of faults and their times")
    a = p.parse_args(argv)
    if a.soak is not None and (a.only or a.quick):
        raise SystemExit("error: --soak runs faults of every kind in one run; drop --only and --quick")
    if a.soak is not None and not (a.soak > 0 and a.fault_every > 0):
        raise SystemExit("error: --soak and --fault-every take seconds > 0")
    workdir = Path(a.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "faults.log"
    emit = lambda line: print(line, flush=True)  # noqa: E731
    if a.soak is not None:
        from rollart.faults.soak import soak
        print(f"soak ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC): {a.soak:g} s of recipe {a.recipe}, a fault "
              f"about every {a.fault_every:g} s (seed {a.seed}); workdir {workdir}; actor output in {log}", flush=True)
        report = logged(log, soak(workdir, a.recipe, a.soak, a.fault_every, a.seed, emit=emit))
        print(report.last_line(), flush=True)
        raise SystemExit(0 if report.ok else 1)
    faults = select(a.only, a.quick)
    print(f"fault suite ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC): {', '.join(faults)}"
          f"{' (--quick)' if a.quick else ''}; recipe {a.recipe}; workdir {workdir}; actor output in {log}", flush=True)
    figures = logged(log, run_suite(faults, workdir, a.recipe, a.quick, emit=emit))
    print(summary(figures), flush=True)
    raise SystemExit(0 if all(f.ok for f in figures) else 1)


def logged(log: Path, coro):
    """Run ``coro`` with every process's stderr and this one's warnings in ``log``; print the wall time and load."""
    started, load_before = time.monotonic(), os.getloadavg()
    with stderr_to(log):
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                            force=True)
        result = asyncio.run(coro)
    load_after = os.getloadavg()
    print(f"wall_s={time.monotonic() - started:.0f} cores={os.cpu_count()} load_1m={load_before[0]:.2f}->"
          f"{load_after[0]:.2f}", flush=True)
    return result
