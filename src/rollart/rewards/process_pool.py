"""The reward endpoint's process pool: worker processes (:mod:`rollart.rewards.pool_worker`) fed from one asyncio
queue, started while calls wait and no worker is idle (up to ``max_workers``) and gone after ``idle_timeout``
seconds without work, so an idle endpoint holds zero processes.

A worker is spawned and waited for until it has imported the reward functions (its cold start); a call that
overruns ``call_timeout``, or a worker that dies mid-call, fails that call as retryable and the worker is replaced.
Each call's reply is a dict ``{"ok", "result" | "error", "retryable", "status"}`` with the HTTP status the endpoint
answers with. The pool counts busy and alive worker-seconds for the endpoint's utilisation figure.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from rollart.rewards.serve import ServeConfig


@dataclasses.dataclass
class Job:
    fn: str
    args: list
    kwargs: dict
    fault: Optional[str]
    future: asyncio.Future


class WorkerPool:
    """Autoscaled worker processes fed from one asyncio queue."""

    def __init__(self, cfg: ServeConfig, specs: list[str]):
        self.cfg, self.specs = cfg, specs
        self.jobs: asyncio.Queue[Job] = asyncio.Queue()
        self.workers = 0
        self.idle = 0
        self.busy_seconds = 0.0
        self.alive_seconds_closed = 0.0
        self._alive_since: dict[int, float] = {}
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task] = set()
        self.spawned = 0
        n = str(cfg.worker_threads)
        self._thread_env = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}

    def submit(self, job: Job) -> None:
        self.jobs.put_nowait(job)
        if self.jobs.qsize() > self.idle and self.workers < self.cfg.max_workers:
            self.workers += 1  # count now so a burst does not over-spawn
            task = asyncio.create_task(self._worker_loop())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def alive_seconds(self) -> float:
        now = time.monotonic()
        return self.alive_seconds_closed + sum(now - t for t in self._alive_since.values())

    async def _spawn(self) -> asyncio.subprocess.Process:
        """Start a worker and wait until it has imported the functions (its cold start)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rollart.rewards.pool_worker", "--functions", ",".join(self.specs),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
            limit=4 * self.cfg.max_request_bytes, env={**os.environ, **self._thread_env})
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), self.cfg.startup_timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise RuntimeError(f"reward worker not ready after {self.cfg.startup_timeout}s "
                               "(server setting startup_timeout)") from None
        if not line:
            raise RuntimeError(f"reward worker exited during start-up (code {await proc.wait()})")
        return proc

    async def _worker_loop(self) -> None:
        wid = next(self._ids)
        self._alive_since[wid] = time.monotonic()
        self.spawned += 1
        proc: Optional[asyncio.subprocess.Process] = None
        try:
            try:
                proc = await self._spawn()
            except (RuntimeError, OSError) as e:  # cannot start: fail what waits, with the reason
                while not self.jobs.empty():
                    job = self.jobs.get_nowait()
                    if not job.future.done():
                        job.future.set_result({"ok": False, "status": 500, "retryable": True,
                                               "error": f"{job.fn}: {e}"})
                return
            while True:
                # 1) wait for a job; leave when idle too long (scale to zero)
                self.idle += 1
                try:
                    job = await asyncio.wait_for(self.jobs.get(), self.cfg.idle_timeout)
                except asyncio.TimeoutError:
                    return
                finally:
                    self.idle -= 1
                # 2) run it; a dead or overrunning worker fails this call and is replaced
                if job.future.done():  # the client went away
                    continue
                t0 = time.monotonic()
                reply = await self._run(proc, job)
                self.busy_seconds += time.monotonic() - t0
                if not job.future.done():
                    job.future.set_result(reply)
                if proc.returncode is not None or reply.get("_kill"):
                    return
        finally:
            self.workers -= 1
            self.alive_seconds_closed += time.monotonic() - self._alive_since.pop(wid)
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
            # work may still be queued with no one left to take it
            if self.jobs.qsize() and self.workers < self.cfg.max_workers and self.idle == 0:
                self.workers += 1
                task = asyncio.create_task(self._worker_loop())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _run(self, proc: asyncio.subprocess.Process, job: Job) -> dict:
        msg = {"id": 0, "fn": job.fn, "args": job.args, "kwargs": job.kwargs, "fault": job.fault}
        try:
            proc.stdin.write((json.dumps(msg) + "\n").encode())
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), self.cfg.call_timeout)
        except asyncio.TimeoutError:
            return {"ok": False, "status": 504, "_kill": True, "retryable": True,
                    "error": f"{job.fn}: timed out after {self.cfg.call_timeout}s (raise call_timeout "
                             "if the function is legitimately slow)"}
        except (ConnectionError, BrokenPipeError) as e:
            return {"ok": False, "status": 500, "_kill": True, "retryable": True,
                    "error": f"{job.fn}: worker lost ({e})"}
        if not line:
            code = await proc.wait()
            return {"ok": False, "status": 500, "_kill": True, "retryable": True,
                    "error": f"{job.fn}: worker process died during the call (exit code {code})"}
        reply = json.loads(line)
        reply["status"] = 200 if reply["ok"] else 500
        if not reply["ok"]:  # the function raised: deterministic, a retry would fail the same way
            reply["retryable"] = bool(reply.get("retryable", False))  # (true only for injected faults)
        return reply

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
