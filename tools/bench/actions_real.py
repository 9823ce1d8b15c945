"""The REAL half of the ARL-Tangram actions benchmark (``actions.py``), run on this machine: generated
pytest suites through the CPU manager vs static per-trajectory cores, torch-module services in the GPU
pool, and the serverless reward endpoint vs a dedicated worker. Run alone, it benchmarks a real grpo_swe
rollout with actions on against per-trajectory static allocation:

    python tools/bench/actions_real.py --quick     # < 60 s: 4 SWE trajectories, each mode played once
    python tools/bench/actions_real.py             # 8 trajectories, modes played twice in mirrored order
    python tools/bench/actions_real.py --profile   # speed-up of the SWE hidden suites on 1 and 2 cores

The rollout (:func:`real_rollout`) plays the recipe's SWE episodes (real sandboxes, real tool calls, the
hidden tests at submission, from ``recipes.grpo_swe``'s task spec and step_action) with the gold-patch agent
standing in for the LLM: its messages are the tool calls a solving model would write, and each turn's
generation is a seeded lognormal wait (SIMULATED: no model runs, so generation takes no CPU from the
actions). Every mode plays the same tasks, seeds, waits and test suites, on the same 2 cores.

The baseline is the paper's (ARL-Tangram, §6.1 "Baselines", AI coding): Kubernetes gives each trajectory a
pod, created when the trajectory starts and held until it ends, requesting 0.5 CPU with a limit of 4 CPUs.
So a trajectory reserves its share for its whole lifetime, idle while its LLM generates; a node admits pods
while their requests fit its cores (4 pods on 2 cores here) and a trajectory whose pod does not fit waits
until one ends (that wait is charged to its first action's ACT, less what its first LLM turn overlaps);
inside its pod a trajectory's processes share the node's cores (no pinning) and its tests run as the
dataset's plain single-process ``pytest``. The 4-CPU limit is at least the 2 cores, so it caps nothing here.
``cpu_act_speedup`` is this baseline's mean per-trajectory ACT over the actions mode's. The earlier
baseline (each trajectory pinned to core ``i mod 2``, no admission limit) is kept as ``pinned_rr``, its ratio
as ``cpu_act_speedup_rr``.

``real_overhead_pct`` is Table 1's ratio: the scheduler's CPU time (deciding, starting and finishing
actions) over the actions' execution time; ``real_overhead_wall_pct`` the same CPU over the rollout's wall
time. ``cpu_queue_share``: the share of the actions mode's ACT spent queued for cores. With the profiled
per-file split (``actions.test_speedup``: splitting a start-up-bound suite slows it) the scheduler gives
every test run one core, so on 2 cores the actions mode can gain only by ordering (first come first served
on exclusive cores against processor sharing: at most (k/c) / ((k/c + 1) / 2) for k equal CPU-bound runs
arriving together on c cores, 1.33 for 4 on 2) and by not queueing for pods (none in ``--quick``: 4
trajectories fit 4 pods). Measured on uncontended cores (the run at real-time priority, so other load on
the machine cannot take its core), a hidden test run is CPU-bound (CPU / wall 0.93-0.97) and takes about
0.15 s; split over 2 cores it takes 0.154 s against 0.165 s (x1.07 for 1.7x the CPU), so elastic DoP is worth
at most about 1.07 on these suites, not the 2x that 2 cores allow. On a busy machine the test runs take 3-9x
longer and the exclusive cores are not exclusive: the figures then measure contention with the other load
(the pod mode, running 4 processes to the scheduler's 2, takes a larger share of a contended machine), so the
load average is printed at the start and the end. Last line: key=value pairs.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import socket
import subprocess
import sys
import time
from collections import defaultdict
from typing import Optional

from rollart.actions.action import table
from rollart.actions.static import StaticSlotRunner
from rollart.actions.cpu import CpuManager

import actions_emulated
from actions_emulated import mean


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
SPEC = {False: "rollart.sim.judge:judge_score", True: "rollart.rewards.rules:math_reward"}
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


# The paper's AI-coding baseline (ARL-Tangram §6.1, "Baselines"): Kubernetes, one pod per trajectory created at
# the trajectory's start and held until it ends, requesting 0.5 CPU ("to allow limited multiplexing") with a
# limit of 4 CPUs. A node admits pods while their requests fit its cores (2 per core here); a trajectory whose
# pod does not fit waits for one to end. Inside a pod, processes run on the node's shared cores (no pinning:
# the default CPU manager policy) and the dataset's test command is plain single-process pytest.
POD_REQUEST_CPU = 0.5
POD_LIMIT_CPU = 4.0


async def play_swe(episodes: list[dict], mode: str, cores: list[int]) -> dict:
    """Play ``episodes`` at once on a real EnvHost. Modes:

    - ``actions``: every env step is an action of :class:`rollart.actions.run.RunActions` on ``cores``;
    - ``pod`` (the paper's baseline): each trajectory holds a pod slot (``POD_REQUEST_CPU`` of ``cores``) from
      its start to its end, waiting for one when none is free; its steps run unpinned on ``cores`` with one
      pytest process; the slot wait counts as queueing of the trajectory's first action, less the part its
      first LLM turn overlaps;
    - ``pinned_rr`` (the earlier baseline): trajectory ``i`` runs every step pinned to core ``i mod 2``, with
      no admission limit (trajectories share a core once they outnumber the cores).

    Returns per-step action completion times (queue + execution) by kind, the queueing part of them, the
    scheduler's CPU and wall time."""
    import recipes.grpo_swe as recipe
    from rollart.actions.config import ActionsConfig
    from rollart.actions.run import RunActions
    from rollart.messages import CloseEnv, CloseIdleEnvs, CreateEnv, ResetEnv, StepEnv
    from rollart.rollout.env_host import EnvHost
    from rollart.rollout.env_manager import _step_action

    if mode not in ("actions", "pod", "pinned_rr"):
        raise ValueError(f"mode must be actions, pod or pinned_rr, got {mode!r}")
    cfg = recipe.default_config()
    cfg.env_max_turns = max(len(e["messages"]) for e in episodes)
    spec = recipe.swe_task(cfg)
    host = EnvHost()
    actions = RunActions(ActionsConfig(enabled=True, cores=tuple(cores))) if mode == "actions" else None
    pods = asyncio.Semaphore(max(1, int(len(cores) / POD_REQUEST_CPU))) if mode == "pod" else None
    acts: dict[str, list[float]] = defaultdict(list)
    waits: list[float] = []  # pod mode: the slot wait charged to first actions
    held = [0, 0]  # pod mode: pods held now, most held at once
    success = []

    async def one(i: int, ep: dict) -> None:
        granted = [0.0]

        async def setup() -> tuple[str, dict]:
            # at the trajectory's start, while its first LLM turn runs: its pod (pod mode), then its env
            if pods is not None:
                await pods.acquire()
                granted[0] = time.monotonic()
                held[0] += 1
                held[1] = max(held)
            try:
                key = (await host.create(CreateEnv(spec.env_id, spec.env_kwargs)))["key"]
            except BaseException:
                if pods is not None:
                    held[0] -= 1
                    pods.release()
                raise
            reset = await host.reset(ResetEnv(key, seed=i, options={"task_id": ep["task"]}))
            assert reset["ok"], reset
            return key, reset["info"]

        env = asyncio.ensure_future(setup())
        key, info = None, {}
        try:
            for turn, (msg, gen) in enumerate(zip(ep["messages"], ep["gen"])):
                await asyncio.sleep(gen)  # the LLM's turn (simulated)
                wait = 0.0
                if key is None:  # create/reset are not actions (no side times them); a pod wait is queueing
                    t0 = time.monotonic()
                    key, info = await env
                    if pods is not None:
                        wait = max(0.0, granted[0] - t0)
                        waits.append(wait)
                kind, most = _step_action(spec, msg, turn, info)
                t1 = time.monotonic()
                if actions is not None:
                    async def step(grant, msg=msg):
                        return await host.step(StepEnv(key, msg, list(grant)))
                    result = await actions.env_step(step, i, kind=kind, max_units=most)
                elif mode == "pod":
                    result = await host.step(StepEnv(key, msg, None))  # unpinned on the pod's node, one process
                else:
                    result = await host.step(StepEnv(key, msg, [cores[i % len(cores)]]))
                acts[kind].append(time.monotonic() - t1 + wait)
                assert result["ok"], result
                if result["terminated"] or result["truncated"]:
                    success.append(result["info"].get("success", False))
                    break
        finally:
            if key is None:
                env.cancel()
                with contextlib.suppress(BaseException):
                    key, info = await env
            if key is not None:
                await host.close(CloseEnv(key))
                if pods is not None:
                    held[0] -= 1
                    pods.release()

    t0 = time.monotonic()
    await asyncio.gather(*(one(i, ep) for i, ep in enumerate(episodes)))
    wall = time.monotonic() - t0
    out = {"acts": dict(acts), "wall": wall, "sched_cpu": 0.0, "queue": sum(waits), "run": 0.0, "test_units": [],
           "success": sum(success) / max(1, len(success)), "pods_peak": held[1], "waits": waits}
    if actions is not None:
        records = actions.scheduler.records
        out.update(sched_cpu=actions.scheduler.cpu_seconds, queue=sum(r.start - r.submit for r in records),
                   run=sum(r.end - r.start for r in records),
                   test_units=[r.units for r in records if r.kind == "test_run"])
        await actions.close()
    await host.close_idle(CloseIdleEnvs())
    return out


MODES = ("pod", "actions", "pinned_rr")


async def real_rollout(quick: bool) -> dict:
    cores = sorted(os.sched_getaffinity(0))[:2]
    # threads started from here on (the env host's) and their children stay on these cores: the pod
    # baseline's unpinned processes share exactly the cores the scheduler hands out
    os.sched_setaffinity(0, cores)
    episodes = swe_episodes(4 if quick else 8, seed=0)
    # the shared machine's load drifts: the full mode plays each mode twice, in mirrored order
    order = list(MODES) if quick else list(MODES) + list(reversed(MODES))
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for mode in order:
        r = await play_swe(episodes, mode, cores)
        runs[mode].append(r)
        n = sum(len(v) for v in r["acts"].values())
        log(f"[real rollout] {mode}: {len(episodes)} SWE trajectories, {n} env-step actions, wall {r['wall']:.1f}s, "
            f"mean ACT test_run {mean(r['acts'].get('test_run', [])):.3f}s sandbox_command "
            f"{mean(r['acts'].get('sandbox_command', [])):.3f}s file_op {mean(r['acts'].get('file_op', [])):.3f}s, "
            f"queueing {r['queue']:.2f}s in all, hidden tests passed {r['success']:.2f}")

    def per_traj(mode: str, kind: Optional[str] = None) -> float:
        return sum(sum(v) for r in runs[mode] for k, v in r["acts"].items() if kind in (None, k)) / (
            len(runs[mode]) * len(episodes))

    def total(mode: str, key: str) -> float:
        return sum(r[key] for r in runs[mode])

    out = {"cores": cores, "trajectories": len(episodes), "pod_slots": max(1, int(len(cores) / POD_REQUEST_CPU)),
           "sched_cpu": total("actions", "sched_cpu"), "wall": total("actions", "wall"),
           "run": total("actions", "run"), "queue": total("actions", "queue"),
           "test_units": [u for r in runs["actions"] for u in r["test_units"]],
           "pod_wait": total("pod", "queue") / (len(runs["pod"]) * len(episodes))}
    for mode in MODES:
        out[mode] = per_traj(mode)
        out[mode + "_test"] = per_traj(mode, "test_run")
        out[mode + "_cmd"] = out[mode] - out[mode + "_test"]
        out[mode + "_wall"] = total(mode, "wall") / len(runs[mode])
    return out


def profile_suites(repeats: int = 3) -> dict[int, float]:
    """Wall time of every built-in SWE task's hidden test run (gold patch applied) with 1 and 2 pytest
    processes (per-file split) on 1 and 2 pinned cores, one task at a time; median over ``repeats``."""
    import statistics

    from envs.swe.env import SWEEnv
    from envs.swe.reward import evaluate, suite_files
    from envs.swe.scripted import ScriptedAgent, gold_patch_actions
    from envs.swe.task import load_builtin_tasks
    from rollart.cpus import on_cores
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


def plot_rollout(res: dict, emulated: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    actions_emulated.plot(emulated, axes[0][0], axes[0][1])
    ax = axes[1]
    names = ["pod per trajectory\n(paper's baseline)", "actions", "pinned round-robin\n(earlier baseline)"]
    wait = [res["pod_wait"] if m == "pod" else 0.0 for m in MODES]
    cmd = [res[m + "_cmd"] - w for m, w in zip(MODES, wait)]
    test = [res[m + "_test"] for m in MODES]
    ax[0].bar(names, wait, label="waiting for a pod (charged to the first action)")
    ax[0].bar(names, cmd, bottom=wait, label="sandbox commands and file operations")
    ax[0].bar(names, test, bottom=[a + b for a, b in zip(wait, cmd)], label="test runs (visible + hidden)")
    ax[0].set_ylabel("action completion time per trajectory (s)")
    ax[0].set_title(f"REAL grpo_swe rollout, {res['trajectories']} trajectories on {len(res['cores'])} cores "
                    "(LLM turns simulated)", fontsize=9)
    ax[0].legend(fontsize=8)
    us = res["test_units"]
    ax[1].hist(us, bins=[0.5, 1.5, 2.5], rwidth=0.6)
    ax[1].set_xticks([1, 2])
    ax[1].set_xlabel("cores granted per test run (actions mode)")
    ax[1].set_title(f"scheduler CPU {1e3 * res['sched_cpu']:.1f} ms over {res['run']:.1f} s of action execution",
                    fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=90)


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description="real grpo_swe rollout: actions on vs per-trajectory static cores")
    p.add_argument("--quick", action="store_true", help="< 60 s")
    p.add_argument("--profile", action="store_true", help="profile the SWE hidden suites on 1 and 2 cores")
    a = p.parse_args()
    from rollart.cpus import cpu_limit_line
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
    t0, load0 = time.monotonic(), os.getloadavg()[0]
    emulated = asyncio.run(actions_emulated.emulated_rollout(
        actions_emulated.QUICK if a.quick else actions_emulated.FULL, log=log))
    res = asyncio.run(real_rollout(a.quick))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots", "actions_real.png")
    plot_rollout(res, emulated, path)
    dop = {u: res["test_units"].count(u) for u in sorted(set(res["test_units"]))}
    log(f"[real rollout] per trajectory ACT: pod {res['pod']:.2f}s (of it pod wait {res['pod_wait']:.2f}s; "
        f"{res['pod_slots']} pods of {POD_REQUEST_CPU} CPU fit {len(res['cores'])} cores, limit {POD_LIMIT_CPU:g} "
        f"CPU >= the cores: no cap) | actions {res['actions']:.2f}s | pinned round-robin {res['pinned_rr']:.2f}s")
    log(f"[real rollout] test runs {res['pod_test']:.2f} / {res['actions_test']:.2f} / {res['pinned_rr_test']:.2f}s, "
        f"commands {res['pod_cmd']:.2f} / {res['actions_cmd']:.2f} / {res['pinned_rr_cmd']:.2f}s; rollout wall "
        f"{res['pod_wall']:.1f} / {res['actions_wall']:.1f} / {res['pinned_rr_wall']:.1f}s")
    log(f"[real rollout] actions mode: queueing {res['queue']:.2f}s + execution {res['run']:.2f}s in all; test-run "
        f"DoP chosen {dop}; scheduler CPU {1e3 * res['sched_cpu']:.1f} ms; plot {path}; "
        f"wall {time.monotonic() - t0:.0f}s, load average {os.getloadavg()[0]:.2f} (at the start {load0:.2f})")
    pairs = {"real_act_speedup": emulated["act_speedup"],
             "real_env_speedup": emulated["env_speedup"],
             "real_reward_speedup": emulated["reward_speedup"],
             "real_act_sim_same_trace": emulated["sim_act_speedup"],
             "real_act_excess_pct": 100 * emulated["excess_share"],
             "cpu_act_speedup": res["pod"] / res["actions"],
             "cpu_act_speedup_rr": res["pinned_rr"] / res["actions"],
             "real_overhead_pct": 100 * res["sched_cpu"] / res["run"],
             "real_overhead_wall_pct": 100 * res["sched_cpu"] / res["wall"],
             "cpu_test_speedup": res["pod_test"] / res["actions_test"],
             "cpu_cmd_speedup": res["pod_cmd"] / res["actions_cmd"] if res["actions_cmd"] else float("nan"),
             "cpu_queue_share": res["queue"] / (res["queue"] + res["run"])}
    print(" ".join(f"{k}={v:.4g}" for k, v in pairs.items()) + f" real_act_timing={emulated['timing']}", flush=True)


if __name__ == "__main__":
    main()
