"""The REAL half of the ARL-Tangram actions benchmark (``actions.py``), run on this machine: generated
pytest suites through the CPU manager vs static per-trajectory cores, torch-module services in the GPU
pool, and the serverless reward endpoint vs a dedicated worker. Run alone, it benchmarks a real grpo_swe
rollout with actions on against per-trajectory static cores:

    python tools/bench/actions_real.py --quick     # < 60 s: 4 SWE trajectories per mode, one pass each
    python tools/bench/actions_real.py             # 8 trajectories per mode, order static/actions/actions/static
    python tools/bench/actions_real.py --profile   # speed-up of the SWE hidden suites on 1 and 2 cores

The rollout (:func:`real_rollout`) plays the recipe's SWE episodes (real sandboxes, real tool calls, the
hidden tests at submission, from ``recipes.grpo_swe``'s task spec and step_action) with the gold-patch agent
standing in for the LLM: its messages are the tool calls a solving model would write, and each turn's
generation is a seeded lognormal wait (SIMULATED: no model runs, so generation takes no CPU from the
actions). Both modes play the same tasks, seeds and waits. Last line: key=value pairs.
"""
from __future__ import annotations

import asyncio
import math
import os
import random
import socket
import subprocess
import sys
import time
from typing import Optional

from rollart.actions.action import table
from rollart.actions.static import StaticSlotRunner
from rollart.actions.cpu import CpuManager


def log(msg: str) -> None:
    print(msg, flush=True)


# -- real: CPU manager on this machine ---------------------------------------------------------------
SUITE = '''
import time
def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
'''


def make_suite(tests: int, seconds: float) -> str:
    return SUITE + "".join(f"def test_{i}():\n    busy({seconds})\n" for i in range(tests))


def pytest_cmd() -> list[str]:
    """The test run, as both static and action-level modes execute it: plugin auto-loading off (the
    venv's unrelated pytest plugins doubled start-up CPU), xdist loaded explicitly; ``-n {xdist}`` is
    ``-n 0`` (in-process, like the static baseline's plain ``pytest``) on one core, else one worker per core."""
    return ["env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1", sys.executable, "-m", "pytest", "-q", "-p",
            "no:cacheprovider", "-p", "xdist", "-n", "{xdist}", "test_suite.py"]


TOOL = [sys.executable, "-c", "import time\nend=time.process_time()+0.03\nwhile time.process_time()<end: pass"]


async def real_cpu(quick: bool) -> dict:
    rng = random.Random(0)
    batch, turns = (2, 1) if quick else (6, 3)
    trajs = [{"gen": [rng.lognormvariate(math.log(0.4), 0.5) for _ in range(turns + 1)],
              "tests": rng.randint(6, 12)} for _ in range(batch)]
    test_seconds = 0.05 if quick else 0.1  # CPU seconds per generated test

    # profile the test-run elasticity once (what ARL-Tangram profiles in advance)
    mgr = CpuManager([[0, 1]], memory_per_node=64, elastic=True)
    prof = {}
    write = [sys.executable, "-c", f"open('test_suite.py','w').write({make_suite(8, test_seconds)!r})"]
    for dop in (1, 2):
        await mgr.submit(mgr.command(("prof", dop), write))
        r = await mgr.submit(mgr.command(("prof", dop), pytest_cmd(), units=(dop,)))
        prof[dop] = r.seconds
    await mgr.close()
    speedup = {1: 1.0, 2: min(2.0, prof[1] / prof[2])}
    log(f"[real cpu] profiled test run: DoP1 {prof[1]:.2f}s DoP2 {prof[2]:.2f}s -> speedup {speedup[2]:.2f}")

    async def run_elastic() -> tuple[list[float], float, float]:
        mgr = CpuManager([[0, 1]], memory_per_node=64, elastic=True)
        acts = [0.0] * batch

        async def one(i: int, t: dict) -> None:
            suite = [sys.executable, "-c", f"open('test_suite.py','w').write({make_suite(t['tests'], test_seconds)!r})"]
            for k in range(turns):
                await asyncio.sleep(t["gen"][k])
                t0 = time.monotonic()
                await mgr.submit(mgr.command(i, suite if k == 0 else TOOL))
                acts[i] += time.monotonic() - t0
            await asyncio.sleep(t["gen"][turns])
            t0 = time.monotonic()
            t_ori = prof[1] * t["tests"] / 8
            r = await mgr.submit(mgr.command(i, pytest_cmd(), units=(1, 2), elasticity=table(speedup),
                                             t_ori=t_ori, kind="reward_test"))
            assert r.returncode == 0, r.stdout + r.stderr
            acts[i] += time.monotonic() - t0
        await asyncio.gather(*(one(i, t) for i, t in enumerate(trajs)))
        sched = mgr.schedulers[0]
        decision = sum(sched.decision_latency)
        execution = sum(rec.end - rec.start for rec in sched.records)
        await mgr.close()
        return acts, decision, execution

    async def run_static() -> list[float]:
        import tempfile
        runner = StaticSlotRunner([0, 1], cores_per_slot=1)
        acts = [0.0] * batch
        root = tempfile.mkdtemp(prefix="rollart-static-")

        async def one(i: int, t: dict) -> None:
            cwd = os.path.join(root, str(i))
            os.makedirs(cwd)
            suite = [sys.executable, "-c", f"open('test_suite.py','w').write({make_suite(t['tests'], test_seconds)!r})"]
            for k in range(turns):
                await asyncio.sleep(t["gen"][k])
                t0 = time.monotonic()
                await runner.run(i, suite if k == 0 else TOOL, cwd)
                acts[i] += time.monotonic() - t0
            await asyncio.sleep(t["gen"][turns])
            t0 = time.monotonic()
            code, out, _ = await runner.run(i, pytest_cmd(), cwd)
            assert code == 0, out
            acts[i] += time.monotonic() - t0
            runner.end_trajectory(i)
        await asyncio.gather(*(one(i, t) for i, t in enumerate(trajs)))
        runner.close()
        subprocess.run(["rm", "-rf", root])
        return acts

    # A B (quick) or A B B A (full): the shared machine's load drifts, so alternate the order
    order = ["static", "elastic"] if quick else ["static", "elastic", "elastic", "static"]
    acts = {"static": [], "elastic": []}
    decision = execution = 0.0
    for mode in order:
        if mode == "static":
            acts["static"] += await run_static()
        else:
            e, d, x = await run_elastic()
            acts["elastic"] += e
            decision, execution = decision + d, execution + x
    out = {"static": sum(acts["static"]) / len(acts["static"]),
           "elastic": sum(acts["elastic"]) / len(acts["elastic"]),
           "overhead_pct": 100 * decision / execution}
    log(f"[real cpu] batch {batch} on 2 cores: mean per-trajectory ACT static {out['static']:.2f}s, "
        f"action-level {out['elastic']:.2f}s; decision time {1e3 * decision:.1f} ms over "
        f"{execution:.1f} s of execution = {out['overhead_pct']:.3f}%")
    return out


# -- real: GPU manager with torch modules as services ----------------------------------------------
async def real_gpu(quick: bool) -> dict:
    """10 services restored on demand into a memory-capped pool of 8 "GPUs" (torch modules on CPU)."""
    import torch

    from rollart.actions.action import Action, amdahl
    from rollart.actions.gpu import DeviceCache, GpuPool, TorchServiceHost
    from rollart.actions.runtime import ActionScheduler

    torch.manual_seed(0)
    torch.set_num_threads(1)  # 2 shared cores: intra-op threads only add contention here
    width = 256

    def factory(i: int):
        return lambda: torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(2 + i % 3)])
    host = TorchServiceHost({f"svc{i}": factory(i) for i in range(10)})
    pool = GpuPool("gpu", nodes=1)
    biggest = max(host.bytes.values())
    cache = DeviceCache(pool, gpu_memory=1.2 * biggest, service_bytes=host.bytes,
                        restore=host.restore, evict=host.evict)
    sched = ActionScheduler({"gpu": pool})
    rng = random.Random(0)
    shares = [rng.paretovariate(1.2) for _ in range(10)]
    n = 40 if quick else 120
    services = rng.choices([f"svc{i}" for i in range(10)], weights=shares, k=n)
    peak = 0.0

    def request(service: str) -> Action:
        async def payload(grant: dict):
            nonlocal peak
            module, _ = cache.ensure(service, grant["gpu"])
            peak = max(peak, max(cache.used((0, g)) for g in range(8)))
            with torch.no_grad():
                x = torch.randn(64, width)  # (B, D)
                for _ in range(5):
                    x = torch.tanh(module(x))
            await asyncio.sleep(0)
            return x.sum().item()
        return Action({}, key="gpu", units=(1, 2, 4, 8), elasticity=amdahl(0.9), t_ori=0.05,
                      service=service, kind="logprob", payload=payload)

    t0 = time.monotonic()
    for i in range(0, n, 8):  # bursts of 8 requests
        await asyncio.gather(*(sched.submit(request(s)) for s in services[i:i + 8]))
    wall = time.monotonic() - t0
    out = {"requests": n, "restores": cache.restores, "evictions": cache.evictions, "hits": cache.hits,
           "restore_ms": 1e3 * sum(host.restore_seconds) / max(1, len(host.restore_seconds)),
           "peak_frac": peak / cache.gpu_memory, "wall": wall}
    log(f"[real gpu] {n} requests to 10 torch-module services on 8 pooled units (cap {cache.gpu_memory / 1e6:.1f} MB "
        f"per unit): {cache.restores} restores ({out['restore_ms']:.1f} ms each), {cache.evictions} LRU "
        f"evictions, {cache.hits} warm hits; peak per-unit memory {100 * out['peak_frac']:.0f}% of cap; {wall:.1f}s")
    return out


# -- real: serverless endpoint vs a dedicated worker -----------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# full: the torch judge scorer; --quick: the torch-free rule reward (workers start in a fraction of the
# time on a loaded machine), labelled in the log
FUNCTION = {False: "judge_score", True: "math_reward"}
SPEC = {False: "rollart.rewards.judge:judge_score", True: "rollart.rewards.rules:math_reward"}
IDLE = {False: 2.0, True: 1.0}  # serverless worker idle timeout (s) before scaling down


async def real_reward(quick: bool) -> dict:
    import aiohttp
    from rollart.rewards.client import RewardClient

    rng = random.Random(1)
    batch, turns = (4, 2) if quick else (10, 4)
    gens = [[rng.lognormvariate(math.log(0.6), 0.5) for _ in range(turns)] for _ in range(batch)]
    texts = [f"step {i}: the answer is {rng.randint(0, 99)}. " * 8 for i in range(batch)]
    results = {}
    for mode in ("dedicated", "serverless"):
        port = free_port()
        args = [sys.executable, "-m", "rollart.rewards.serve", "--port", str(port),
                "--functions", SPEC[quick]]
        if mode == "dedicated":  # one always-on worker on its own core
            cmd = ["taskset", "-c", "1"] + args + ["--max-workers", "1", "--idle-timeout", "1e6"]
        else:
            cmd = args + ["--max-workers", "2", "--idle-timeout", str(IDLE[quick])]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            proc.stdout.readline()
            url = f"http://127.0.0.1:{port}"
            async with RewardClient(url) as client, aiohttp.ClientSession() as http:
                deadline = time.monotonic() + 180  # start-up imports torch: slow on a busy machine
                while True:
                    try:
                        async with http.get(url + "/health"):
                            break
                    except aiohttp.ClientError:
                        if time.monotonic() > deadline or proc.poll() is not None:
                            raise RuntimeError(f"reward endpoint ({mode}) did not come up on {url}")
                        await asyncio.sleep(0.2)
                if mode == "dedicated":
                    await client.call(FUNCTION[quick], "warm", "up")  # hot standby
                async with http.get(url + "/stats") as r:
                    before = await r.json()
                t0 = time.monotonic()

                async def one(i: int) -> None:
                    for k in range(turns):
                        await asyncio.sleep(gens[i][k])
                        await client.call(FUNCTION[quick], texts[i], "the answer is 42")
                await asyncio.gather(*(one(i) for i in range(batch)))
                rollout = time.monotonic() - t0
                await asyncio.sleep(IDLE[quick] + 0.5 if mode == "serverless" else 0.0)  # scale to zero
                async with http.get(url + "/stats") as r:
                    after = await r.json()
            busy = after["busy_seconds"] - before["busy_seconds"]
            alive = after["alive_seconds"] - before["alive_seconds"]
            results[mode] = {"rollout": rollout, "utilisation": busy / alive if alive else 0.0,
                             "spawned": after["spawned"], "workers_after": after["workers"]}
            log(f"[real reward] {mode} ({FUNCTION[quick]}): rollout {rollout:.2f}s, worker utilisation "
                f"{100 * results[mode]['utilisation']:.1f}% (busy {busy:.2f}s / alive {alive:.2f}s), "
                f"workers spawned {after['spawned']}, alive at end {after['workers']}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return results


# -- real: a grpo_swe rollout, actions on vs per-trajectory static cores ---------------------------
KINDS = ("test_run", "sandbox_command", "file_op")


def swe_episodes(n: int, seed: int) -> list[dict]:
    """``n`` SWE episodes: task, gold-patch messages, and a generation wait per message (seeded)."""
    from envs.swe.scripted import gold_patch_actions
    from envs.swe.task import load_builtin_tasks

    tasks = load_builtin_tasks()
    rng = random.Random(seed)
    picked = rng.sample(tasks, min(n, len(tasks)))
    out = []
    for t in picked:
        msgs = gold_patch_actions(t, run_tests=True)
        out.append({"task": t.instance_id, "messages": msgs,
                    "gen": [rng.lognormvariate(math.log(0.3), 0.6) for _ in msgs]})
    return out


async def play_swe(episodes: list[dict], mode: str, cores: list[int]) -> dict:
    """Play ``episodes`` at once on a real EnvHost; every env step is an action (``actions``) or runs on its
    trajectory's fixed core (``static``: slots dealt round-robin, shared once trajectories outnumber cores).
    Returns per-step action completion times (queue + execution) by kind, scheduler CPU and wall time."""
    import recipes.grpo_swe as recipe
    from rollart.actions.config import ActionsConfig
    from rollart.actions.run import RunActions
    from rollart.rollout.env_host import EnvHost
    from rollart.rollout.env_manager import _step_action

    cfg = recipe.default_config()
    cfg.env_max_turns = max(len(e["messages"]) for e in episodes)
    spec = recipe.swe_task(cfg)
    host = EnvHost()
    actions = RunActions(ActionsConfig(enabled=True, cores=tuple(cores))) if mode == "actions" else None
    acts: dict[str, list[float]] = {"test_run": [], "sandbox_command": [], "file_op": []}
    units: list[int] = []
    success = []

    async def one(i: int, ep: dict) -> None:
        key = (await host.create(spec.env_id, spec.env_kwargs))["key"]
        try:
            reset = await host.reset(key, seed=i, options={"task_id": ep["task"]})
            assert reset["ok"], reset
            for turn, (msg, gen) in enumerate(zip(ep["messages"], ep["gen"])):
                await asyncio.sleep(gen)  # the LLM's turn (simulated)
                kind, most = _step_action(spec, msg, turn, reset["info"])
                t0 = time.monotonic()
                if actions is not None:
                    async def step(granted, msg=msg):
                        units.append(len(granted))
                        return await host.step(key, msg, list(granted))
                    result = await actions.env_step(step, i, kind=kind, max_units=most)
                else:
                    result = await host.step(key, msg, [cores[i % len(cores)]])
                acts[kind].append(time.monotonic() - t0)
                assert result["ok"], result
                if result["terminated"] or result["truncated"]:
                    success.append(result["info"].get("success", False))
                    break
        finally:
            await host.close(key)

    t0 = time.monotonic()
    await asyncio.gather(*(one(i, ep) for i, ep in enumerate(episodes)))
    wall = time.monotonic() - t0
    cpu = decide = 0.0
    if actions is not None:
        cpu, decide = actions.scheduler.cpu_seconds, sum(actions.scheduler.decision_latency)
        await actions.close()
    await host.close_idle()
    return {"acts": acts, "wall": wall, "sched_cpu": cpu, "decide_wall": decide, "units": units,
            "success": sum(success) / max(1, len(success))}


async def real_rollout(quick: bool) -> dict:
    cores = sorted(os.sched_getaffinity(0))[:2]
    episodes = swe_episodes(4 if quick else 8, seed=0)
    order = ["static", "actions"] if quick else ["static", "actions", "actions", "static"]
    runs: dict[str, list[dict]] = {"static": [], "actions": []}
    for mode in order:
        r = await play_swe(episodes, mode, cores)
        runs[mode].append(r)
        n = sum(len(v) for v in r["acts"].values())
        log(f"[real rollout] {mode}: {len(episodes)} SWE trajectories, {n} env-step actions, wall {r['wall']:.1f}s, "
            f"mean ACT test_run {_mean(r['acts']['test_run']):.3f}s sandbox_command "
            f"{_mean(r['acts']['sandbox_command']):.3f}s file_op {_mean(r['acts']['file_op']):.3f}s, "
            f"hidden tests passed {r['success']:.2f}")

    def per_traj(mode: str, kind: Optional[str] = None) -> float:
        kinds = [kind] if kind else list(KINDS)
        return sum(sum(r["acts"][k]) for r in runs[mode] for k in kinds) / (len(runs[mode]) * len(episodes))
    act = runs["actions"]
    out = {"static": per_traj("static"), "actions": per_traj("actions"),
           "static_test": per_traj("static", "test_run"), "actions_test": per_traj("actions", "test_run"),
           "static_cmd": per_traj("static") - per_traj("static", "test_run"),
           "actions_cmd": per_traj("actions") - per_traj("actions", "test_run"),
           "sched_cpu": sum(r["sched_cpu"] for r in act), "wall": sum(r["wall"] for r in act),
           "exec": sum(sum(r["acts"][k]) for r in act for k in r["acts"]),
           "units": [u for r in act for u in r["units"]], "cores": cores}
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def profile_suites(repeats: int = 3) -> dict[int, float]:
    """Wall time of every built-in SWE task's hidden test run (gold patch applied) with 1 and 2 pytest
    processes (per-file split) on 1 and 2 pinned cores, one task at a time; median over ``repeats``."""
    import statistics

    from envs.swe.env import SWEEnv
    from envs.swe.reward import evaluate, suite_files
    from envs.swe.scripted import ScriptedAgent, gold_patch_actions
    from envs.swe.task import load_builtin_tasks
    from rollart.actions.placement import on_cores
    from rollart.sandbox import SandboxConfig

    cores = sorted(os.sched_getaffinity(0))[:2]
    times: dict[int, list[float]] = {1: [], 2: []}
    for task in load_builtin_tasks():
        env = SWEEnv(task_ids=(task.instance_id,), sandbox=SandboxConfig(timeout_s=30.0, disk_mb=32, memory_mb=512))
        try:
            env.reset(options={"task_id": task.instance_id})
            agent = ScriptedAgent(gold_patch_actions(task)[:-1])  # apply the fix, do not submit
            while agent.actions:
                env.step(agent.act(""))
            for dop in (1, 2):
                with on_cores(cores[:dop]):
                    ts = [evaluate(task, env.sandbox.workspace, env.config.sandbox).duration_s for _ in range(repeats)]
                times[dop].append(statistics.median(ts))
            log(f"[profile] {task.instance_id}: {len(suite_files(task))} test files, hidden run "
                f"{times[1][-1]:.3f}s on 1 core, {times[2][-1]:.3f}s on 2 cores (split per file)")
        finally:
            env.close()
    total = {d: sum(v) for d, v in times.items()}
    return {"t1": total[1], "t2": total[2], "speedup2": total[1] / total[2],
            "per_task": list(zip(times[1], times[2]))}


PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "swe_suite_profile.json")


def plot_rollout(res: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    names = ["static", "actions"]
    cmd = [res["static_cmd"], res["actions_cmd"]]
    test = [res["static_test"], res["actions_test"]]
    ax[0].bar(names, cmd, label="sandbox commands and file operations")
    ax[0].bar(names, test, bottom=cmd, label="test runs (hidden + visible)")
    ax[0].set_ylabel("action completion time per trajectory (s)")
    ax[0].set_title("REAL grpo_swe rollout on this machine (LLM turns simulated)", fontsize=10)
    ax[0].legend()
    us = res["units"]
    ax[1].hist(us, bins=[-0.5, 0.5, 1.5, 2.5], rwidth=0.6)
    ax[1].set_xticks([0, 1, 2])
    ax[1].set_xlabel("cores granted per env-step action (actions mode; 0: a file operation)")
    ax[1].set_title(f"scheduler CPU {1e3 * res['sched_cpu']:.1f} ms over {res['wall']:.1f} s of rollout", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=90)


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description="real grpo_swe rollout: actions on vs per-trajectory static cores")
    p.add_argument("--quick", action="store_true", help="< 60 s")
    p.add_argument("--profile", action="store_true", help="profile the SWE hidden suites on 1 and 2 cores")
    a = p.parse_args()
    from rollart.actions.placement import cpu_limit_line
    log(cpu_limit_line())
    log(f"cores: {len(os.sched_getaffinity(0))} usable, load average {os.getloadavg()[0]:.2f}")
    if a.profile:
        import json
        load0 = os.getloadavg()[0]
        r = profile_suites()
        r.update(utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), load_start=load0,
                 load_end=os.getloadavg()[0], cores=len(os.sched_getaffinity(0)))
        os.makedirs(os.path.dirname(PROFILE), exist_ok=True)
        with open(PROFILE, "w") as f:
            json.dump(r, f, indent=1)
        log(f"[profile] all {len(r['per_task'])} suites: {r['t1']:.2f}s on 1 core, {r['t2']:.2f}s on 2 cores; "
            f"written to {PROFILE}")
        print(f"suite_speedup_2cores={r['speedup2']:.4g}", flush=True)
        return
    t0 = time.monotonic()
    res = asyncio.run(real_rollout(a.quick))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots", "actions_real.png")
    plot_rollout(res, path)
    share = {u: res["units"].count(u) / len(res["units"]) for u in sorted(set(res["units"]))}
    log(f"[real rollout] per trajectory ACT static {res['static']:.2f}s vs actions {res['actions']:.2f}s "
        f"(test runs {res['static_test']:.2f} / {res['actions_test']:.2f}, commands {res['static_cmd']:.2f} / "
        f"{res['actions_cmd']:.2f}); cores granted {share}; scheduler CPU {1e3 * res['sched_cpu']:.1f} ms; "
        f"plot {path}; wall {time.monotonic() - t0:.0f}s, load {os.getloadavg()[0]:.2f}")
    pairs = {"real_act_speedup": res["static"] / res["actions"],
             "real_overhead_pct": 100 * res["sched_cpu"] / res["wall"],
             "real_overhead_exec_pct": 100 * res["sched_cpu"] / res["exec"],
             "real_test_speedup": res["static_test"] / res["actions_test"],
             "real_cmd_speedup": res["static_cmd"] / res["actions_cmd"]}
    print(" ".join(f"{k}={v:.4g}" for k, v in pairs.items()), flush=True)


if __name__ == "__main__":
    main()
