"""ActorHost: the thin Ray actor that runs one rollart actor process on the node Ray placed it on.

Ray places it (placement group bundle, custom resource, ``num_gpus`` -> CUDA_VISIBLE_DEVICES) and tears it
down; the process it runs, ``python -m rollart.actors.serve --connect ...``, joins the coordinator over
ZeroMQ like any actor process and dies with this host (PR_SET_PDEATHSIG). Nothing but start/wait/kill
crosses Ray.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import tempfile


class ActorHost:
    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.keys_dir: str | None = None

    async def start(self, serve_args: list[str], env: dict, paths: list[str], keys: dict | None) -> dict:
        """Start the actor process; return where it runs. ``paths``: the coordinator's import path (the ones
        that exist on this node are put first on PYTHONPATH); ``keys``: CURVE key files by name, written to
        a private directory on this node."""
        import ray

        argv = [sys.executable, "-m", "rollart.actors.serve", *serve_args, "--parent-pid", str(os.getpid())]
        if keys:
            self.keys_dir = tempfile.mkdtemp(prefix="rollart-curve-")  # mode 0700
            for name, text in keys.items():
                path = os.path.join(self.keys_dir, name)
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)  # authorized/
                with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                    f.write(text)
            argv += ["--curve-dir", self.keys_dir]
        child_env = {**os.environ, **env}
        here = [p for p in paths if os.path.isdir(p)]
        child_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*here, *filter(None, sys.path)]))
        self.proc = await asyncio.create_subprocess_exec(*argv, env=child_env, stdin=asyncio.subprocess.DEVNULL)
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "host": socket.gethostname(), "ip": ray.util.get_node_ip_address(),
                "pid": self.proc.pid, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}

    async def wait(self) -> int:
        """The actor process's exit code, once it exits."""
        rc = await self.proc.wait()
        if self.keys_dir:
            shutil.rmtree(self.keys_dir, ignore_errors=True)
        return rc

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
