"""A reward endpoint started for one run: ``python -m rollart.rewards.serve`` as a child process.

    async with LocalEndpoint(cfg) as url:        # cfg: RewardConfig with serverless=true
        client = RewardClient(url, token=cfg.token or None)

The endpoint binds a free port and names it on its first stdout line; stopping it sends SIGTERM (the
endpoint kills its worker processes as it exits) and SIGKILL if it does not exit within ``stop_timeout``.
"""
from __future__ import annotations

import asyncio
import logging
import re
import sys
from typing import Optional

from rollart.rewards.config import RewardConfig

log = logging.getLogger("rollart.rewards")

_BANNER = re.compile(r"reward endpoint on (http://\S+)")


def banner_url(line: str) -> Optional[str]:
    """The URL an endpoint names on its first stdout line, or None when the line is not its banner."""
    match = _BANNER.search(line)
    return match.group(1) if match else None


class LocalEndpoint:
    """The child process of one local reward endpoint; ``url`` once started."""

    def __init__(self, cfg: RewardConfig, startup_timeout: float = 120.0, stop_timeout: float = 10.0):
        self.cfg, self.startup_timeout, self.stop_timeout = cfg, startup_timeout, stop_timeout
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.url = ""

    def argv(self) -> list[str]:
        c = self.cfg
        args = [sys.executable, "-m", "rollart.rewards.serve", "--port", "0", "--functions", ",".join(c.functions),
                "--max-workers", str(c.max_workers), "--idle-timeout", str(c.idle_timeout_s),
                "--call-timeout", str(c.call_timeout_s), "--fault-rate", str(c.fault_rate),
                "--fault-seed", str(c.fault_seed)]
        return args + (["--token", c.token] if c.token else [])

    async def start(self) -> str:
        self.proc = await asyncio.create_subprocess_exec(*self.argv(), stdout=asyncio.subprocess.PIPE,
                                                         stdin=asyncio.subprocess.DEVNULL)
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), self.startup_timeout)
        except asyncio.TimeoutError:
            await self.stop()
            raise RuntimeError(f"local reward endpoint did not start within {self.startup_timeout:g}s") from None
        url = banner_url(line.decode(errors="replace"))
        if url is None:
            code = await self.proc.wait()
            raise RuntimeError(f"local reward endpoint exited at start (code {code}; its error is on stderr "
                               f"above): check reward.functions={list(self.cfg.functions)}")
        self.url = url
        log.info("local reward endpoint %s (pid %d)", self.url, self.proc.pid)
        return self.url

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self) -> None:
        """Stop the endpoint and its workers (idempotent)."""
        if not self.running:
            return
        self.proc.terminate()
        try:
            await asyncio.wait_for(self.proc.wait(), self.stop_timeout)
        except asyncio.TimeoutError:
            log.warning("local reward endpoint (pid %d) ignored SIGTERM for %gs; killing it", self.proc.pid,
                        self.stop_timeout)
            self.proc.kill()
            await self.proc.wait()

    async def __aenter__(self) -> str:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()
