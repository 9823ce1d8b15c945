"""ARL-Tangram live on an emulated CPU pool (SIMULATED timing): a real grpo_swe rollout whose actions last what the
paper's AI-coding actions last on one of its 256-core nodes, the real action scheduler deciding.

    (run by ``tools/bench/actions_real.py``: full = 256 trajectories on 256 emulated cores; ``--quick`` = 24 on 24)

Workload: the AI-coding trace of :mod:`rollart.sim.coding_actions` (ARL-Tangram §6, every parameter sourced in
``CodingTraceConfig``: ~22 single-core tool turns a trajectory with lognormal durations, LLM turns of median 4 s,
then a long-tailed reward test run that scales with cores as Amdahl's law with a fraction in U(0.72, 0.86), DoP
1..32 as §6.4 gives it). The paper's evaluation runs batch 1280 on 5 nodes of 256 cores, a scheduler per node;
this runs one node with its share of the batch (256 trajectories on 256 cores; ``--quick``: 24 on 24, the same
core per trajectory, a smoke test: a node smaller than the largest DoP).

Real: the SWE environment (``recipes.grpo_swe``'s task spec on EnvHost actor processes, 8 in the full run, reached
over the actor runtime as a training run reaches them): every trajectory creates its env and resets it to a
built-in task, then plays one tool call per trace turn — reading the files the fix touches (file views, and every
fifth a shell command in its bubblewrap sandbox), then the gold patch's edits — and submits, which runs the task's
hidden tests in the sandbox (the reward; the gold patch passes them). In the actions mode every step is an action of the product's
:class:`rollart.actions.run.RunActions` on a :class:`CorePool` of the emulated cores (Algorithm 1–2 choosing the
test run's DoP from the profiled curve, Amdahl 0.79 over 1..32, and the run's measured mean duration), exactly as
``actions.enabled=true`` schedules a training run's env steps.

Emulated (SIMULATED timing): the cores (their ids are the emulated node's; the real commands run on this
machine's cores, unpinned) and each action's duration — the trace's one-core seconds, a test run's over its
Amdahl speed-up on the cores it was granted — held by :class:`rollart.actions.emulated.EmulatedExecution`, and
the LLM turns (waits). Every tool turn holds one emulated core, as the trace's single-core tool action does (a
file view too, which in a training run holds none). ``scale`` real seconds make one emulated second. An action whose real command took longer
than its emulated duration *outran* it; the run counts those and their excess, and labels its timing MIXED when
the excess exceeds 1 % of either mode's summed ACT. The full run's scale is 0.7: at 0.35 the bursts of real
commands (256 trajectories start together; their hidden test runs cluster) made 15 % of the pod mode's ACT real
excess (sandbox commands waiting seconds for this machine's cores), at 0.7 it is about 0.1 %.

Baseline: the paper's (§6.1, AI coding): a pod per trajectory from its start to its end, requesting 0.5 CPU
(limit 4), admitted while requests fit the node (512 pods on 256 cores); its commands run at once in the pod, as
the dataset's single-process commands, the node's cores shared equally among the commands running
(:class:`rollart.sim.actions_baselines.SharedCores`, CFS among equal requests, on the emulated clock).

Not modelled: Kubernetes' control-plane queueing behind the paper's 9.0x on env interactions (§6.2), so the gain
here is the reward test runs' elastic DoP less the queueing it adds to tool calls; the simulated figure for the
same trace (``simulate_coding`` / ``simulate_static``) is printed beside the live one.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

from rollart.actions.action import amdahl
from rollart.actions.emulated import EmulatedExecution
from rollart.sim.actions_baselines import SharedCores, simulate_static
from rollart.sim.coding_actions import CodingTraceConfig, Step, coding_trace, simulate_coding

POD_REQUEST_CPU = 0.5
MAX_DOP = 32
"""ARL-Tangram §6.4: the elastic DoP of a test run ranges from 1 to 32."""
PROFILED_FRACTION = 0.79
"""The scheduler's profiled Amdahl fraction of a test run: the mean of the trace's U(0.72, 0.86)."""
MIXED_EXCESS = 0.01
"""Timing is labelled MIXED when real work outlasting emulated time adds more than this share of a mode's ACT."""
EXPLORE = (("view", {"path": "{path}"}), ("bash", {"command": "grep -n 'def ' {path}"}),
           ("view", {"path": "{path}", "start_line": 1, "end_line": 40}), ("view", {"path": "{path}"}),
           ("view", {"path": "{path}", "start_line": 20, "end_line": 60}))
"""A trajectory's exploring tool calls, in turn: one shell command in the sandbox for four file views (the
env host reads the file itself), so that 256 trajectories' real commands fit this machine's two cores."""


@dataclass
class Setup:
    cores: int
    trace: CodingTraceConfig
    scale: float
    """Real seconds per emulated second."""
    hosts: int = 0
    """EnvHost actor processes the envs are spread over (0: one host in this process)."""


FULL = Setup(256, CodingTraceConfig(batch=256), scale=0.7, hosts=8)
QUICK = Setup(24, CodingTraceConfig(batch=24), scale=0.03, hosts=2)


def episodes(trace: list[list[Step]], seed: int = 0) -> list[dict]:
    """One SWE episode per trace trajectory: a built-in task (round robin over a seeded order), one tool call per
    tool turn of the trace — read-only commands on the files the fix touches, then the gold patch's edits — and
    the submission (the hidden tests) at its reward turn."""
    import random

    from envs.swe.patch import parse_patch
    from envs.swe.scripted import gold_patch_actions
    from envs.swe.toolcall import format_tool_call
    from envs.swe.task import load_builtin_tasks

    tasks = load_builtin_tasks()
    random.Random(seed).shuffle(tasks)
    out = []
    for i, steps in enumerate(trace):
        task = tasks[i % len(tasks)]
        gold = gold_patch_actions(task)  # edits ..., submit
        paths = [fp.path for fp in parse_patch(task.patch) if fp.old_path is not None] or ["."]
        tools = len(steps) - 1
        explore = []
        for k in range(tools - (len(gold) - 1)):
            name, args = EXPLORE[k % len(EXPLORE)]
            path = paths[k % len(paths)]
            explore.append(format_tool_call(name, **{a: v.format(path=path) if isinstance(v, str) else v
                                                     for a, v in args.items()}))
        out.append({"task": task.instance_id, "messages": explore + gold})
    return out


def profiled_speedup() -> tuple[float, ...]:
    """Speed-ups on 1..MAX_DOP cores the scheduler is given (ActionsConfig.test_speedup)."""
    return tuple(amdahl(PROFILED_FRACTION)(m) * m for m in range(1, MAX_DOP + 1))


def busy_seconds() -> float:
    """CPU-seconds this machine's cores have been busy since boot (every process: the env hosts' too)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


async def play(mode: str, setup: Setup, trace: list[list[Step]], eps: list[dict], pool,
               speedup: tuple[float, ...] | None = None) -> dict:
    """Play every episode at once in ``mode`` (``actions`` or ``pod``) on the emulated node, the envs on ``pool``'s
    hosts (:class:`rollart.rollout.env_client.EnvPool`). ``speedup``: the actions mode's profiled test-run curve
    (default :func:`profiled_speedup`; ``(1.0,)`` keeps tests on one core)."""
    import recipes.grpo_swe as recipe
    from envs.swe.toolcall import format_tool_call
    from rollart.actions.config import ActionsConfig
    from rollart.actions.run import RunActions
    from rollart.rollout.env_client import EnvFailure
    from rollart.rollout.env_manager import _step_action

    if mode not in ("actions", "pod"):
        raise ValueError(f"mode must be actions or pod, got {mode!r}")
    cfg = recipe.default_config()
    cfg.env_max_turns = max(len(e["messages"]) for e in eps) + 1  # + the warm-up command
    spec = recipe.swe_task(cfg)
    gate = asyncio.Semaphore(8)

    async def make(i: int, ep: dict):
        """The env, reset to its task, with one command run in its sandbox (the first command a new sandbox
        runs costs seconds under load): set up before the clock starts, in no action's ACT, as a pod is."""
        async with gate:
            session = await pool.open(spec.env_id, spec.env_kwargs)
            _, info = await session.reset(seed=i, options={"task_id": ep["task"]})
            await session.step(format_tool_call("bash", command="true"))
            return session, info
    envs = await asyncio.gather(*(make(i, ep) for i, ep in enumerate(eps)))

    async def step_env(session, msg: str) -> dict:
        try:
            return {"ok": True, "info": (await session.step(msg))[4]}
        except EnvFailure as e:  # this trajectory's env failed: counted, the others go on
            return {"ok": False, "error": str(e)}

    emu = EmulatedExecution(setup.scale)
    clock = emu.clock
    actions = node = pods = None
    if mode == "actions":
        curve = speedup or profiled_speedup()
        tests = [s.seconds for steps in trace for s in steps if s.kind == "reward_test"]
        actions = RunActions(ActionsConfig(enabled=True, cores=tuple(range(setup.cores)), test_speedup=curve,
                                           test_t_ori_s=setup.scale * sum(tests) / len(tests)))
    else:
        node = SharedCores(clock, setup.cores, cap=1.0)
        pods = asyncio.Semaphore(int(setup.cores / POD_REQUEST_CPU))
    acts = [0.0] * len(eps)
    by_kind: dict[str, list[float]] = defaultdict(list)
    units: list[int] = []
    results = Counter()
    errors: dict[str, int] = {}
    cpu0, wall0 = busy_seconds(), time.monotonic()

    async def one(i: int) -> None:
        session, info = envs[i]
        if pods is not None:  # the pod is requested at the trajectory's start; a wait for it is ACT (Pending)
            t0 = clock.now
            await pods.acquire()
            acts[i] += clock.now - t0
        try:
            for turn, (msg, step) in enumerate(zip(eps[i]["messages"], trace[i])):
                await clock.sleep(step.gen)  # the LLM's turn (emulated)
                t1 = clock.now
                if actions is not None:
                    async def run(grant, msg=msg, step=step):
                        m = max(1, len(grant))
                        if step.kind == "reward_test":
                            units.append(m)
                        return await emu.hold(step_env(session, msg), clock.sleep(step.seconds / step.speed(m)))
                    kind, _ = _step_action(spec, msg, turn, info)
                    result = await actions.env_step(run, i, kind=kind,
                                                    max_units=MAX_DOP if step.kind == "reward_test" else None)
                else:
                    result = await emu.hold(step_env(session, msg), emu.shared(node, step.seconds))
                act = clock.now - t1
                acts[i] += act
                by_kind[step.kind].append(act)
                results["steps"] += 1
                if not result["ok"]:
                    results["failed"] += 1
                    errors[result["error"][:120]] = errors.get(result["error"][:120], 0) + 1
                    break
                if step.kind == "reward_test":
                    results["passed"] += bool(result["info"].get("success"))
        finally:
            if pods is not None:
                pods.release()
            await pool.release(session)

    await asyncio.gather(*(one(i) for i in range(len(eps))))
    out = {"acts": acts, "by_kind": dict(by_kind), "units": units, "outruns": emu.outruns, "held": emu.actions,
           "excess_s": emu.excess_s, "wall": time.monotonic() - wall0, "makespan": clock.now,
           "cpu": busy_seconds() - cpu0, "passed": results["passed"], "failed": results["failed"],
           "steps": results["steps"], "errors": errors, "records": emu.records, "sched_cpu": 0.0}
    if actions is not None:
        out["sched_cpu"] = actions.scheduler.cpu_seconds
        await actions.close()
    return out


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def log_mode(log, mode: str, r: dict, batch: int) -> None:
    log(f"[emulated cpu] {mode}: mean ACT per trajectory {mean(r['acts']):.1f} emulated s (tool calls "
        f"{mean(r['by_kind'].get('tool', [])):.2f} s, test runs {mean(r['by_kind'].get('reward_test', [])):.1f} s); "
        f"{r['outruns']} of {r['held']} actions outran their emulated time by {r['excess_s']:.1f} s in all "
        f"({100 * r['excess_s'] / sum(r['acts']):.2f} % of the ACT); hidden tests passed {r['passed']} of {batch}, "
        f"failed steps {r['failed']} {r['errors'] or ''}; makespan {r['makespan']:.0f} emulated s = {r['wall']:.0f} s "
        f"real, the machine busy {r['cpu']:.0f} CPU-s ({100 * r['cpu'] / (r['wall'] * os.cpu_count()):.0f} % of its "
        f"{os.cpu_count()} cores)")


async def emulated_rollout(setup: Setup, speedup: tuple[float, ...] | None = None, log=print) -> dict:
    """Both modes on the same trace and episodes (pod first), the simulated figure for the same trace beside."""
    trace = coding_trace(setup.trace)
    eps = episodes(trace)
    log(f"[emulated cpu] emulated: one ARL-Tangram CPU node of {setup.cores} cores, batch {len(trace)} (the "
        f"paper's 1280 on 5 x 256 cores, per node), {setup.scale:g} real s per emulated s; real: SWE sandboxes, "
        f"tool calls and hidden tests, unpinned on this machine's cores (the emulated core ids pin nothing)")
    from rollart.actors import ActorSystem
    from rollart.rollout.env_client import EnvPool

    runs = {}
    async with contextlib.AsyncExitStack() as stack:
        if setup.hosts:
            system = await stack.enter_async_context(ActorSystem())
            pool = await EnvPool.spawn(system, setup.hosts, {"min_threads": 8}, imports=["envs"])
        else:
            pool = EnvPool.inprocess(imports=("envs",))
        for mode in ("pod", "actions"):
            runs[mode] = await play(mode, setup, trace, eps, pool, speedup)
            log_mode(log, mode, runs[mode], len(trace))
    el = simulate_coding

    el = simulate_coding(trace, 1, setup.cores, charge_latency=False)
    st = simulate_static(trace, 1, setup.cores)
    pod, act = runs["pod"], runs["actions"]
    share = max(r["excess_s"] / sum(r["acts"]) for r in runs.values())
    out = {"runs": runs, "setup": setup,
           "act_speedup": mean(pod["acts"]) / mean(act["acts"]),
           "env_speedup": mean(pod["by_kind"]["tool"]) / mean(act["by_kind"]["tool"]),
           "reward_speedup": mean(pod["by_kind"]["reward_test"]) / mean(act["by_kind"]["reward_test"]),
           "sim_act_speedup": st.mean() / el.mean(), "excess_share": share,
           "timing": "SIMULATED" if share <= MIXED_EXCESS else "MIXED",
           "dop": Counter(act["units"]), "decide_ms_per_action": 1e3 * act["sched_cpu"] / max(1, act["steps"])}
    log(f"[emulated cpu] pod / actions: ACT x{out['act_speedup']:.2f} (tool calls x{out['env_speedup']:.2f}, paper "
        f"Fig. 7 9.0x; test runs x{out['reward_speedup']:.2f}, paper 2.8x); the same trace simulated: "
        f"x{out['sim_act_speedup']:.2f}; test-run DoP {dict(sorted(out['dop'].items()))}; scheduler CPU "
        f"{out['decide_ms_per_action']:.2f} ms per action; timing {out['timing']} (real excess "
        f"{100 * share:.2f} % of ACT)")
    return out


def plot(res: dict, ax_act, ax_dop) -> None:
    runs = res["runs"]
    names = ["pod per trajectory\n(paper's baseline)", "actions\n(ARL-Tangram)"]
    n = len(runs["pod"]["acts"])
    tool = [sum(runs[m]["by_kind"]["tool"]) / n for m in ("pod", "actions")]
    test = [sum(runs[m]["by_kind"]["reward_test"]) / n for m in ("pod", "actions")]
    ax_act.bar(names, tool, label="tool calls")
    ax_act.bar(names, test, bottom=tool, label="reward test runs")
    ax_act.set_ylabel("ACT per trajectory (emulated s)")
    ax_act.set_title(f"SIMULATED timing ({res['timing']}): live SWE rollout, {n} trajectories on an emulated "
                     f"{res['setup'].cores}-core node: x{res['act_speedup']:.2f}", fontsize=8)
    ax_act.legend(fontsize=8)
    dop = res["dop"]
    ax_dop.bar([str(k) for k in sorted(dop)], [dop[k] for k in sorted(dop)])
    ax_dop.set_xlabel("cores granted per test run (actions mode, emulated)")
    ax_dop.set_ylabel("test runs")
