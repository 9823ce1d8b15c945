"""Starting actor processes: ``python -m rollart.actors.serve --connect ... --cls module:Class ...``."""
from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

Launcher = Callable[["LaunchConfig", str, str, bytes, dict], Awaitable[Any]]
"""Starts one actor process: ``await launcher(cfg, name, cls_path, identity, env)`` returns a process-like
object (``pid``, ``returncode``, ``await wait()``, ``kill()``). The default, :func:`start_process`, starts a
local child; ``rollart.distributed.ray_backend`` starts it on a Ray node."""


@dataclass
class LaunchConfig:
    endpoint: str
    """Coordinator endpoint as bound; a wildcard host is replaced by 127.0.0.1 for local children."""
    heartbeat_interval: float
    heartbeat_timeout: float
    torch_threads: int
    """torch intra-op threads in each actor process (OMP_NUM_THREADS too); 0 leaves the default."""
    curve_dir: str | None
    launcher: Launcher | None = None
    """How actor processes start (None: local children, :func:`start_process`)."""

    @property
    def local_endpoint(self) -> str:
        host_port = self.endpoint.removeprefix("tcp://")
        host, _, port = host_port.rpartition(":")
        if host in ("0.0.0.0", "*", "[::]", "::"):
            host = "127.0.0.1"
        return f"tcp://{host}:{port}"

    @property
    def coordinator_timeout(self) -> float:
        """How long an actor waits for heartbeat replies before exiting: generous, so that a coordinator
        that blocks its event loop for a while does not lose its actors; local children also die with
        their parent (PR_SET_PDEATHSIG)."""
        return max(10 * self.heartbeat_timeout, 30.0)


def class_path(cls: type | str, for_process: bool) -> str:
    if isinstance(cls, str):
        if ":" not in cls:
            raise ValueError(f"actor class path must look like 'package.module:ClassName', got {cls!r}")
        return cls
    if not isinstance(cls, type):
        raise TypeError(f"spawn() expects a class or a 'module:Class' string, got {cls!r}")
    if for_process and cls.__module__ == "__main__":
        raise ValueError(f"{cls.__qualname__} is defined in __main__, which an actor process cannot import: "
                         "move it into a module, or use mode='inprocess'")
    if "<locals>" in cls.__qualname__:
        raise ValueError(f"{cls.__qualname__} is defined inside a function; actor classes must be importable "
                         "at module level")
    return f"{cls.__module__}:{cls.__qualname__}"


def child_env(cfg: LaunchConfig, extra: dict) -> dict:
    env = os.environ.copy()
    # the child must import what we can import (test modules, recipes) -> pass our sys.path along
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    if cfg.torch_threads > 0:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(cfg.torch_threads)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def serve_args(cfg: LaunchConfig, name: str, cls_path: str, identity: bytes) -> list[str]:
    """The arguments of ``python -m rollart.actors.serve`` for one incarnation (no parent pid, no keys)."""
    return ["--connect", cfg.local_endpoint, "--cls", cls_path, "--name", name, "--identity", identity.decode(),
            "--heartbeat-interval", repr(cfg.heartbeat_interval),
            "--coordinator-timeout", repr(cfg.coordinator_timeout), "--torch-threads", str(cfg.torch_threads)]


def serve_command(cfg: LaunchConfig, name: str, cls_path: str, identity: bytes) -> list[str]:
    cmd = [sys.executable, "-m", "rollart.actors.serve", *serve_args(cfg, name, cls_path, identity),
           "--parent-pid", str(os.getpid())]
    if cfg.curve_dir:
        cmd += ["--curve-dir", cfg.curve_dir]
    return cmd


async def start_process(cfg: LaunchConfig, name: str, cls_path: str, identity: bytes, env: dict) -> Any:
    return await asyncio.create_subprocess_exec(*serve_command(cfg, name, cls_path, identity),
                                                env=child_env(cfg, env), stdin=asyncio.subprocess.DEVNULL)
