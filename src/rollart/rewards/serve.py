"""Serverless reward endpoint: stateless reward functions behind HTTP, on an autoscaled process pool.

    python -m rollart.rewards.serve --port 8700 --token SECRET \\
        --functions rollart.rewards.rules:math_reward,rollart.rewards.verifiers:exact_match

Wire protocol (:mod:`rollart.rewards.client` speaks it):
``POST {url}/call/{function}`` with JSON ``{"args": [...], "kwargs": {...}}`` and, if the server has a
token, ``Authorization: Bearer TOKEN``. The answer is ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "...", "retryable": bool}`` — HTTP 4xx for bad requests (401 auth, 404 unknown
function, 400 malformed body, 413 too large), 5xx for failures (500 function error or worker crash,
504 timeout). ``retryable`` is false when the reward function itself raised (a deterministic error:
the same call fails again) and true when the worker died, timed out or could not start.

Workers are processes (:mod:`rollart.rewards.pool_worker`) in an autoscaled pool
(:mod:`rollart.rewards.process_pool`): it grows while calls wait and no worker is idle (up to ``max_workers``)
and a worker exits after ``idle_timeout`` seconds without work, so an idle endpoint holds zero processes. A call
that overruns ``call_timeout`` kills its worker. ``GET /stats`` reports utilisation (busy worker-seconds / alive
worker-seconds).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import signal
from typing import Optional

from aiohttp import web

from rollart.config import ConfigError
from rollart.rewards.process_pool import Job, WorkerPool
from rollart.rewards.registry import FunctionRegistry, UnknownFunctionError


@dataclasses.dataclass
class ServeConfig:
    """Settings of one reward endpoint."""

    functions: tuple[str, ...] = ()
    """Reward functions as module:function (optionally alias=module:function)."""
    host: str = "127.0.0.1"
    """Interface to bind."""
    port: int = 8700
    """TCP port (0 picks a free one)."""
    token: Optional[str] = None
    """If set, calls must send Authorization: Bearer TOKEN."""
    max_workers: int = 4
    """Upper bound on worker processes."""
    idle_timeout: float = 2.0
    """Seconds a worker may sit idle before it exits (scale to zero)."""
    call_timeout: float = 30.0
    """Seconds one call may run before its worker is killed and the call fails with 504."""
    startup_timeout: float = 120.0
    """Seconds a new worker may take to import the functions (its cold start)."""
    max_request_bytes: int = 8 * 1024 * 1024
    """Largest accepted request body (trajectories reach a few MB)."""
    worker_threads: int = 1
    """Math-library threads per worker (OMP/MKL/torch): one worker is one vCPU, as on FaaS."""
    fault_rate: float = 0.0
    """Test-only: fraction of calls given an injected fault (raise, crash or hang)."""
    fault_seed: int = 0
    """Seed of the fault injector."""

    def __post_init__(self) -> None:
        if not self.functions:
            raise ConfigError("no reward functions: pass --functions module:fn[,module:fn...]")
        if self.max_workers < 1:
            raise ConfigError(f"max_workers must be >= 1, got {self.max_workers}")
        if self.idle_timeout <= 0 or self.call_timeout <= 0:
            raise ConfigError("idle_timeout and call_timeout must be > 0 seconds")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ConfigError(f"fault_rate must be within [0, 1], got {self.fault_rate}")
        if self.worker_threads < 1:
            raise ConfigError(f"worker_threads must be >= 1, got {self.worker_threads}")
        if self.max_request_bytes < 1024:
            raise ConfigError(f"max_request_bytes={self.max_request_bytes} is too small (>= 1024)")




def _error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status)


class RewardEndpoint:
    """The aiohttp application: validation, auth and fault injection in front of the pool."""

    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        self.registry = FunctionRegistry(cfg.functions)
        self.pool = WorkerPool(cfg, list(self.registry.specs.values()))
        self.rng = random.Random(cfg.fault_seed)
        self.counts = {"calls": 0, "ok": 0, "failed": 0, "rejected": 0}
        self.app = web.Application(client_max_size=cfg.max_request_bytes)
        self.app.router.add_post("/call/{name}", self.call)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/stats", self.stats)
        self.app.on_cleanup.append(lambda app: self.pool.close())

    async def call(self, request: web.Request) -> web.Response:
        self.counts["calls"] += 1
        rejection = self._check(request)
        if rejection is not None:
            self.counts["rejected"] += 1
            return rejection
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.counts["rejected"] += 1
            return _error(413, f"request body over {self.cfg.max_request_bytes} bytes "
                               "(server setting max_request_bytes)")
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            self.counts["rejected"] += 1
            return _error(400, f"body is not JSON ({e}); send {{\"args\": [...], \"kwargs\": {{...}}}}")
        if (not isinstance(payload, dict) or not isinstance(payload.get("args", []), list)
                or not isinstance(payload.get("kwargs", {}), dict)
                or set(payload) - {"args", "kwargs"}):
            self.counts["rejected"] += 1
            return _error(400, "body must be a JSON object {\"args\": [...], \"kwargs\": {...}} "
                               "with no other keys")
        fault = None
        if self.cfg.fault_rate and self.rng.random() < self.cfg.fault_rate:
            fault = self.rng.choice(["raise", "crash", "hang"])
        fut = asyncio.get_running_loop().create_future()
        self.pool.submit(Job(request.match_info["name"], payload.get("args", []),
                             payload.get("kwargs", {}), fault, fut))
        try:
            reply = await fut
        finally:
            if not fut.done():
                fut.cancel()
        self.counts["ok" if reply["ok"] else "failed"] += 1
        body = ({"ok": True, "result": reply["result"]} if reply["ok"] else
                {"ok": False, "error": reply["error"], "retryable": reply.get("retryable", True)})
        return web.json_response(body, status=reply["status"])

    def _check(self, request: web.Request) -> Optional[web.Response]:
        if self.cfg.token is not None:
            if request.headers.get("Authorization", "") != f"Bearer {self.cfg.token}":
                return _error(401, "missing or wrong token: send Authorization: Bearer TOKEN")
        name = request.match_info["name"]
        try:
            self.registry.get(name)
        except UnknownFunctionError as e:
            return _error(404, str(e))
        if request.content_length is not None and request.content_length > self.cfg.max_request_bytes:
            return _error(413, f"request body of {request.content_length} bytes is over "
                               f"{self.cfg.max_request_bytes} (server setting max_request_bytes)")
        return None

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "functions": sorted(self.registry.functions),
                                  "workers": self.pool.workers, "queued": self.pool.jobs.qsize()})

    async def stats(self, request: web.Request) -> web.Response:
        alive = self.pool.alive_seconds()
        return web.json_response({
            **self.counts, "workers": self.pool.workers, "spawned": self.pool.spawned,
            "busy_seconds": self.pool.busy_seconds, "alive_seconds": alive,
            "utilisation": self.pool.busy_seconds / alive if alive > 0 else 0.0})


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--functions", required=True, help="module:fn[,module:fn...]")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8700)
    p.add_argument("--token", default=None)
    p.add_argument("--max-workers", type=int, default=4)
    p.add_argument("--idle-timeout", type=float, default=2.0)
    p.add_argument("--call-timeout", type=float, default=30.0)
    p.add_argument("--startup-timeout", type=float, default=120.0)
    p.add_argument("--max-request-bytes", type=int, default=8 * 1024 * 1024)
    p.add_argument("--worker-threads", type=int, default=1)
    p.add_argument("--fault-rate", type=float, default=0.0)
    p.add_argument("--fault-seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        cfg = ServeConfig(functions=tuple(s for s in a.functions.split(",") if s), host=a.host,
                          port=a.port, token=a.token, max_workers=a.max_workers,
                          idle_timeout=a.idle_timeout, call_timeout=a.call_timeout,
                          startup_timeout=a.startup_timeout, max_request_bytes=a.max_request_bytes,
                          worker_threads=a.worker_threads, fault_rate=a.fault_rate,
                          fault_seed=a.fault_seed)
        endpoint = RewardEndpoint(cfg)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    asyncio.run(_serve(endpoint))


async def _serve(endpoint: RewardEndpoint) -> None:
    """Bind, then print the banner with the bound port (``--port 0`` picks one: a parent process starting
    the endpoint reads it from this line), and serve until SIGTERM or SIGINT, stopping the workers."""
    cfg = endpoint.cfg
    runner = web.AppRunner(endpoint.app)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, cfg.host, cfg.port).start()
        except OSError as e:
            raise SystemExit(f"error: cannot listen on {cfg.host}:{cfg.port} ({e}); pick another --port "
                             "(0 picks a free one)") from None
        port = runner.addresses[0][1]
        print(f"reward endpoint on http://{cfg.host}:{port} functions={sorted(endpoint.registry.functions)}",
              flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()  # on_cleanup closes the pool: workers are killed, not orphaned


if __name__ == "__main__":
    main()
