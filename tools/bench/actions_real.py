"""The REAL half of the ARL-Tangram actions benchmark (``actions.py``), run on this machine: generated
pytest suites through the CPU manager vs static per-trajectory cores, torch-module services in the GPU
pool, and the serverless reward endpoint vs a dedicated worker.
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
