"""The soak: one quickstart-sized run for a given time, a random fault about every ``fault_every`` seconds.

``python -m rollart.faults --soak SECONDS`` trains the recipe's own job (the FrozenLake quickstart by default: its
model, format warm-up, groups, evaluations; the torch trainer with the suite's ledger) with every restart budget
raised, while an injector draws faults from :data:`KINDS`: kill -9 of the inference worker, the trainer, the weight
store or the env host; bursts of env exceptions or env hangs; the serverless reward endpoint stopped (SIGSTOP) for a
while; a flood of malformed frames; the newest checkpoint truncated on disk; the checkpoint disk full for one
checkpoint. The recipe's task is dealt as ``ROWS`` rows (its reset seeds, each once per epoch), so that rows
skipped or trained twice can be counted.

It reports the faults by kind with the time from each to the next training step (recovery), the run's accounts
(every accepted sample trained, dropped with a reason, or still buffered: ``accepted_lost``), the rows of each epoch
trained more than once or never (those still outstanding or dealt again at the end are not skipped), each process's
resident memory at the baseline (a sixth of the run, at most 10 minutes in) and at the end, and the final greedy
success. Its last line: ``faults_injected=N accepted_lost=N rows_skipped=N rows_repeated=N rss_growth_pct=X
final_success=X``; ``rss_growth_pct`` is the largest growth of a process alive at both readings (a restarted
process is a new one: its growth is not comparable, and is left out, saying so).
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rollart.faults.procs import actor_processes, find_actor, kill9
from rollart.faults.soak_report import KINDS, Injection, SoakReport, row_counts, rss_reading

KILLED = {"kill_inference_worker": "InferenceWorker", "kill_trainer": "TrainerActor",
          "kill_weight_store": "WeightStore", "kill_env_host": "EnvHost"}
ROWS = 44
"""The task's rows: reset seeds 0..43, four per start cell of the quickstart's map."""
BURST_S = 15.0
"""How long env-fault bursts and a stopped reward endpoint last."""
ENV_EXC = {"fail_prob": 0.3}
ENV_HANG = {"hang_prob": 0.05, "hang_seconds": 40.0}
"""A hang outlasts the env host's 30 s step timeout, which ends it."""
FRAMES = 1000
"""Malformed frames per flood."""
RESTARTS = 10_000
"""Every restart budget of the soak's run (and the proxy's deaths per worker): faults keep coming."""


class Injector:
    """Draws and injects one fault about every ``fault_every`` seconds while the run goes on."""

    def __init__(self, coordinator: Any, run_dir: Path, endpoint: Any, task_faults: dict, disk: Any,
                 fault_every: float, seed: int, started: float):
        self.coordinator = coordinator
        self.run_dir = run_dir
        self.endpoint = endpoint
        self.task_faults = task_faults
        self.disk = disk
        self.fault_every = fault_every
        self.rng = random.Random(seed)
        self.started = started
        self.injections: list[Injection] = []
        self.skipped: list[str] = []
        self._undo: list[asyncio.Task] = []

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.fault_every * self.rng.uniform(0.5, 1.5))
            kind = self.rng.choice(KINDS)
            step = self.coordinator.step
            try:
                did = await self.inject(kind)
            except Exception as e:  # noqa: BLE001 - a fault that finds nothing to hit is reported, not fatal
                self.skipped.append(f"{kind}: {type(e).__name__}: {str(e)[:120]}")
                continue
            inj = Injection(kind, time.monotonic() - self.started, step, did)
            self.injections.append(inj)
            self._undo.append(asyncio.get_running_loop().create_task(self._recovery(inj)))

    async def _recovery(self, inj: Injection) -> None:
        t0 = time.monotonic()
        while self.coordinator.step <= inj.step:
            await asyncio.sleep(0.25)
        inj.recovery_s = time.monotonic() - t0

    async def inject(self, kind: str) -> str:
        if kind in KILLED:
            proc = find_actor(KILLED[kind])
            if proc is None:
                raise RuntimeError(f"no live {KILLED[kind]} process")
            kill9(proc)
            return f"kill -9 {proc.name} (pid {proc.pid})"
        if kind in ("env_exceptions", "env_hangs"):
            self.task_faults.clear()
            self.task_faults.update(ENV_EXC if kind == "env_exceptions" else ENV_HANG)
            self._later(BURST_S, self.task_faults.clear)
            return f"env faults {dict(self.task_faults)} for {BURST_S:g} s"
        if kind == "reward_endpoint_down":
            pid = self.endpoint.proc.pid
            os.kill(pid, signal.SIGSTOP)
            self._later(BURST_S, lambda: os.kill(pid, signal.SIGCONT))
            return f"SIGSTOP the reward endpoint (pid {pid}) for {BURST_S:g} s"
        if kind == "malformed_frames":
            endpoint = next((p.endpoint for p in actor_processes() if p.endpoint), "")
            if not endpoint:
                raise RuntimeError("no actor process shows the coordinator's endpoint")
            flood = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "rollart.faults.frames", endpoint, "--count", str(FRAMES),
                "--seed", str(self.rng.randrange(1 << 30)), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL)
            try:
                await asyncio.wait_for(flood.wait(), 60.0)
            except TimeoutError:
                flood.kill()
                raise RuntimeError("the flood did not end within 60 s") from None
            return f"{FRAMES} malformed frames"
        if kind == "corrupt_checkpoint":
            from rollart.trainer.checkpoint import candidates
            newest = candidates(self.run_dir / "checkpoints")
            if not newest:
                raise RuntimeError("no checkpoint yet")
            victim = max((p for p in newest[0].rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
            size = victim.stat().st_size
            with open(victim, "r+b") as f:
                f.truncate(size // 2)
            return f"truncated {victim.relative_to(self.run_dir)} ({size} -> {size // 2} bytes)"
        if kind == "disk_full_checkpoint":
            if self.disk.filler.exists() or self.disk.limited is not None:
                raise RuntimeError("the disk is full already")
            trainer = find_actor("TrainerActor")
            if trainer is None and not self.disk.mounted:
                raise RuntimeError("no live trainer process to limit")
            did = self.disk.fill(trainer.pid if trainer else 0)
            self._later(max(BURST_S, 3 * self.fault_every / 4), self.disk.free)  # past the next checkpoint
            return did
        raise ValueError(f"unknown fault kind {kind!r}")

    def _later(self, seconds: float, undo) -> None:
        async def run() -> None:
            await asyncio.sleep(seconds)
            undo()
        self._undo.append(asyncio.get_running_loop().create_task(run()))

    async def close(self) -> None:
        """Undo what is still in effect (a stopped endpoint, a full disk, env bursts) at once; stop watching."""
        for task in self._undo:
            if not task.done():
                task.cancel()
        self.task_faults.clear()
        self.disk.free()
        if self.endpoint.running:
            try:
                os.kill(self.endpoint.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


async def soak(workdir: Path, recipe: str, seconds: float, fault_every: float = 60.0, seed: int = 0,
               emit=print) -> SoakReport:
    from rollart.faults.disk_full import SmallDisk
    from rollart.faults.harness import LEDGER_BACKEND, Harness
    from rollart.faults.rewards import ScoreBook
    from rollart.rewards.client import ClientConfig, RewardClient
    from rollart.rewards.config import RewardConfig
    from rollart.rewards.local import LocalEndpoint

    h = Harness(workdir, recipe, stall_s=max(300.0, 3 * fault_every), deadline_s=seconds + 900.0)
    base = h.base_config
    run_dir = workdir / "soak"
    if run_dir.exists():
        import shutil
        shutil.rmtree(run_dir)
    cfg = dataclasses.replace(
        base, total_steps=10**6, time_limit_s=seconds, stop_at_success=None, logdir=str(workdir), run_name="soak",
        checkpoint_every=2, keep_checkpoints=2, quiet=True, env_hosts=max(1, base.env_hosts),
        trainer=dataclasses.replace(base.trainer, backend=LEDGER_BACKEND), trainer_restarts=RESTARTS,
        weight_store_restarts=RESTARTS, worker_restarts=RESTARTS, env_host_restarts=RESTARTS,
        proxy=dataclasses.replace(base.proxy, max_worker_failures=RESTARTS),
        rollout=dataclasses.replace(base.rollout, max_replacements=max(48, base.rollout.max_replacements),
                                    max_failed_groups=max(64, base.rollout.max_failed_groups)))
    task_faults: dict = {}
    task = dataclasses.replace(h.task, rows=ROWS, faults=task_faults)
    endpoint = LocalEndpoint(RewardConfig(serverless=True, function="episode_reward", max_workers=2,
                                          functions=("rollart.faults.rewards:episode_reward",)))
    url = await endpoint.start()
    client = RewardClient(url, config=ClientConfig(retries=1, backoff=0.05, max_backoff=0.5, timeout=2.0), seed=seed)
    book = ScoreBook(client)
    disk = SmallDisk(run_dir / "checkpoints")
    disk.mount()
    report = SoakReport(seconds)
    state: dict = {}
    started = time.monotonic()

    async def start(coordinator) -> str:
        state["injector"] = injector = Injector(coordinator, run_dir, endpoint, task_faults, disk, fault_every,
                                                seed, started)
        state["task"] = asyncio.get_running_loop().create_task(injector.run())
        state["memory"] = asyncio.get_running_loop().create_task(memory())
        return f"faults start: one about every {fault_every:g} s"

    async def memory() -> None:
        """The baseline reading a sixth into the run (at most 10 minutes in), then one every few seconds: each
        process's end reading is the last one taken while it was up (the run's teardown stops them one by one)."""
        await asyncio.sleep(min(600.0, seconds / 6))
        state["rss0"] = rss_reading()
        state["rss1"] = dict(state["rss0"])
        while True:
            await asyncio.sleep(min(30.0, max(2.0, seconds / 60)))
            state["rss1"].update((name, value) for name, value in rss_reading().items() if value[1])

    try:
        out = await h.drive(cfg, hooks=[(1, start)], scores=book, task=task)
    finally:
        for name in ("task", "memory"):
            if name in state:
                state[name].cancel()
        if "injector" in state:
            await state["injector"].close()
        await client.close()
        await endpoint.stop()
        disk.unmount()
    injector = state.get("injector")
    if injector is not None:
        report.injections, report.skipped_injections = injector.injections, injector.skipped
    report.steps, report.completed, report.error = out.steps, out.completed, out.error
    report.accounts = out.accounts
    before, end = state.get("rss0", {}), state.get("rss1", {})
    report.rss = {n: (*before[n], *end[n]) for n in before if n in end}
    report.rss.update({n: (*before[n], 0, 0) for n in before if n not in end})
    order = out.row_orders.get(task.name)
    if order is None:
        report.rows_skipped = report.rows_repeated = -1
        report.rows_detail = "the run ended before its rows were dealt"
    else:
        report.rows_skipped, report.rows_repeated, report.rows_detail = row_counts(order)
    if out.result is not None and out.result.final_success:
        report.final_success = out.result.final_success.get("mean")
    for line in report.lines():
        emit(line)
    return report
