"""A CLI agent (any harness that takes a base URL and an API key) run as a subprocess inside the sandbox,
reaching the gateway and nothing else.

    AgentTask("fix", cli_agent(["python3", "agent.py"], files={"agent.py": source}), reward_fn=...)

Isolation: the command runs in :class:`rollart.sandbox.Sandbox` (bubblewrap or unshare: its own network
namespace with only a loopback device, only the toolchain and its workspace visible). The gateway's unix socket
is bound into it read-only, and a small forwarder (``rollart/gateway/forward.py``, stdlib only, started first
inside the sandbox) listens on ``127.0.0.1:PORT`` there and relays to that socket, so the harness gets an
ordinary ``OPENAI_BASE_URL=http://127.0.0.1:PORT/v1`` and ``OPENAI_API_KEY``. Nothing else is reachable: no host
TCP port (another network namespace), no other unix socket (not mounted). A sandbox mode without network
isolation (``rlimit``) is refused, and where no isolation works the Sandbox refuses in one line; there is no
weaker fallback.
"""
from __future__ import annotations

import asyncio
import os
import shutil
from importlib import resources
from typing import Any, Callable

from rollart.config import ConfigError
from rollart.gateway.agent_task import Agent, AgentInstance
from rollart.sandbox import RunResult, Sandbox, SandboxConfig
from rollart.sandbox.limits import kill_everything

SOCKET_INSIDE = "/run/rollart-gateway.sock"
FORWARDER_INSIDE = "/opt/rollart/gateway-forward.py"
PORT_INSIDE = 8000


def cli_agent(command: list[str] | Callable[[AgentInstance], list[str]], *, sandbox: SandboxConfig | None = None,
              files: dict[str, bytes | str] | None = None, env: dict[str, str] | None = None,
              timeout_s: float = 120.0, reward: Callable[[RunResult, AgentInstance], float] | None = None) -> Agent:
    """An agent function for :class:`~rollart.gateway.agent_task.AgentTask` that runs ``command`` (or
    ``command(task)``) in a fresh sandbox per trajectory, with ``files`` written into its workspace first.
    ``reward(run_result, task)`` scores it from what it did; without it the task's ``reward_fn`` scores the
    recorded calls."""
    cfg = sandbox or SandboxConfig(timeout_s=timeout_s, cpu_seconds=max(10, int(timeout_s)))
    if cfg.mode == "rlimit":
        raise ConfigError("cli_agent: sandbox mode=rlimit has no network isolation, so the agent could reach more "
                          "than the gateway; use mode=auto, bwrap or unshare")

    async def agent(base_url: str, api_key: str, task: AgentInstance) -> Any:
        if not task.gateway_socket:
            raise RuntimeError("cli_agent needs the gateway's unix socket (Gateway(unix_socket=True); the "
                               "pipeline's gateway has one)")
        sb = await asyncio.to_thread(Sandbox, cfg, name=f"agent-{task.name}")
        try:
            forwarder = sb.dir / "gateway-forward.py"
            shutil.copyfile(str(resources.files("rollart.gateway") / "forward.py"), forwarder)
            os.chmod(forwarder, 0o644)
            for path, data in (files or {}).items():
                sb.write_file(path, data.encode() if isinstance(data, str) else data)
            argv = command(task) if callable(command) else list(command)
            run_env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{PORT_INSIDE}/v1", "OPENAI_API_KEY": api_key,
                       "ROLLART_TASK_SEED": str(task.seed), **(env or {})}
            binds = {task.gateway_socket: SOCKET_INSIDE, str(forwarder): FORWARDER_INSIDE}
            full = ["/usr/bin/python3", FORWARDER_INSIDE, SOCKET_INSIDE, str(PORT_INSIDE), *argv]
            running = asyncio.ensure_future(asyncio.to_thread(sb.run, full, env=run_env, extra_ro_binds=binds))
            try:
                result = await asyncio.shield(running)
            except asyncio.CancelledError:
                kill_everything(sb.last_pgid, sb.uid, sb.cgroups)  # the trajectory was dropped: end the agent
                await asyncio.wait([running])
                raise
        finally:
            await asyncio.to_thread(sb.close)
        if result.killed_reason or result.exit_code != 0:
            raise RuntimeError(f"the sandboxed agent {argv[0]!r} ended with {result.observation()[-400:]}")
        return None if reward is None else {"reward": float(reward(result, task)), "output": result.output}

    return agent
