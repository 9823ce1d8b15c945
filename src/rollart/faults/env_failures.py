"""The env failures: exceptions and hangs injected into the env's own calls on one short real run (see
:mod:`rollart.faults.harness`). Every failure must end its trajectory with a reason, nothing accepted may vanish,
and no hang may hold its trajectory past the env host's step timeout."""
from __future__ import annotations

import dataclasses

from rollart.faults.figures import Figure, ended, failed, not_available, steps_done
from rollart.faults.harness import Harness

ENV_FAIL_PROB = 0.10
"""Share of env calls (reset is spared, every step) that raise."""
ENV_HANG_PROB = 0.01
"""Share of env calls that hang (far longer than the env host's timeout)."""
ENV_TIMEOUT_S = 2.0
"""The env host's step timeout in the env runs: a hang is caught after this long."""


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
                f"the reason; {steps_done(out, cfg.total_steps)}")
        if not out.completed:
            figures.append(failed("env_exc_lost", ended(out), f"{what}; {ended(out)}", out.seconds))
        elif raised == 0:
            figures.append(not_available("env_exc_lost", f"no injected exception reached a trajectory; {what}",
                                         out.seconds))
        else:
            a = out.accounts
            figures.append(Figure("env_exc_lost", str(a.lost), a.lost == 0 and not a.overcounted,
                                  f"{what}; {a.describe()}", out.seconds, {"raised": raised, "lost": a.lost}))
    if hang:
        what = (f"{ENV_HANG_PROB:.0%} of env steps hung for 600 s{both}: {hung} caught by the {ENV_TIMEOUT_S:g} s "
                f"env timeout; {leaked} env sessions never released; {steps_done(out, cfg.total_steps)}")
        if out.stalled:
            figures.append(Figure("env_hang_deadlocks", "1", False, f"{what}; {out.error}", out.seconds,
                                  {"caught": hung, "leaked": leaked}))
        elif not out.completed:
            figures.append(failed("env_hang_deadlocks", ended(out), f"{what}; {ended(out)}", out.seconds))
        elif hung == 0:
            figures.append(not_available("env_hang_deadlocks", f"no injected hang reached a trajectory; {what}",
                                         out.seconds))
        else:
            figures.append(Figure("env_hang_deadlocks", str(leaked), leaked == 0, what, out.seconds,
                                  {"caught": hung, "leaked": leaked}))
    return figures
