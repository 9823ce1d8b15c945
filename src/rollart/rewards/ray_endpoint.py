"""The run's reward endpoint on a Ray cluster (``reward.serverless=true`` with ``cluster.backend=ray``).

Ray places ``python -m rollart.rewards.serve`` (the endpoint and its autoscaling pool of worker processes) on a
node that declares the class ``reward.hw_class`` (a custom resource, as the inference classes are), or on any
node with a free CPU when it names none, and restarts it on a surviving node when its node is lost. The endpoint
then serves on another address: a call that cannot reach it asks Ray where it serves now and goes on there.

    endpoint = RayEndpoint(cfg.reward)
    url = await endpoint.start()            # placed by Ray; its node's IP
    call = endpoint.following(client)       # client.call that follows the endpoint across restarts
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any, Awaitable, Callable

from rollart.config import ConfigError
from rollart.rewards.client import RewardCallError, RewardClient
from rollart.rewards.config import RewardConfig
from rollart.rewards.local import LocalEndpoint

log = logging.getLogger("rollart.rewards")

CLASS_SHARE = 0.01
"""How much of its class's custom resource the endpoint holds: it only has to land on such a node, not take one
of the devices the run's workers are placed on."""


class EndpointHost:
    """The Ray actor that runs one endpoint process on its node; the process dies with it (PR_SET_PDEATHSIG)."""

    def __init__(self, argv: list[str], paths: list[str]) -> None:
        import subprocess

        import ray

        from rollart.rewards.local import banner_url

        ip = ray.util.get_node_ip_address()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(
            [*(p for p in paths if os.path.isdir(p)), *filter(None, sys.path)]))}
        self.proc = subprocess.Popen([sys.executable, *argv[1:], "--host", ip], stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
        line = self.proc.stdout.readline().decode(errors="replace")
        url = banner_url(line)
        if url is None:
            raise RuntimeError(f"the reward endpoint exited at start (code {self.proc.wait()}); its error is in "
                               "this Ray worker's log")
        self.where_ = {"url": url, "node_id": ray.get_runtime_context().get_node_id(), "pid": self.proc.pid}

    def where(self) -> dict:
        """{url, node_id, pid} of the endpoint this incarnation runs."""
        return self.where_

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM, so the endpoint stops its worker processes; its exit code (None if still running)."""
        import subprocess

        self.proc.terminate()
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None


def _die_with_parent() -> None:
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class RayEndpoint:
    """The endpoint's Ray actor seen from the coordinator: ``start`` / ``stop`` / ``running`` as LocalEndpoint,
    ``placements`` (where each incarnation served) and ``following(client)``."""

    def __init__(self, cfg: RewardConfig, cpus: float = 1.0):
        self.cfg, self.cpus = cfg, cpus
        self.actor: Any = None
        self.url = ""
        self.placements: list[dict] = []

    async def start(self) -> str:
        import ray

        if self.cfg.hw_class and ray.cluster_resources().get(self.cfg.hw_class, 0) <= 0:
            raise ConfigError(f"reward.hw_class={self.cfg.hw_class!r}: no node of the Ray cluster declares it (`ray "
                              f"start --resources '{{\"{self.cfg.hw_class}\": N}}'`); name a class it has, or "
                              "leave it empty for any CPU node")
        options: dict[str, Any] = {"num_cpus": self.cpus, "max_restarts": -1, "max_task_retries": -1}
        if self.cfg.hw_class:
            options["resources"] = {self.cfg.hw_class: CLASS_SHARE}
        argv = LocalEndpoint(self.cfg).argv()
        self.actor = ray.remote(EndpointHost).options(**options).remote(argv, [p for p in sys.path if p])
        try:
            await self.locate()
        except ray.exceptions.RayError as e:
            await self.stop()
            raise RuntimeError(f"reward endpoint on Ray did not start: {str(e).strip().splitlines()[-1]}; check "
                               f"reward.functions={list(self.cfg.functions)}") from None
        return self.url

    async def locate(self) -> str:
        """Where the endpoint serves now (waits while Ray restarts it on another node)."""
        where = await asyncio.wrap_future(self.actor.where.remote().future())
        if not self.placements or where != self.placements[-1]:
            self.placements.append(where)
            if len(self.placements) > 1:
                log.warning("reward endpoint restarted by Ray on node %s: %s", where["node_id"][:12], where["url"])
            else:
                log.info("reward endpoint placed by Ray on node %s: %s", where["node_id"][:12], where["url"])
        self.url = where["url"]
        return self.url

    def following(self, client: RewardClient) -> Callable[..., Awaitable[Any]]:
        """``client.call``, except that a call which could not reach the endpoint at all (no HTTP answer) asks
        where it serves now and, when it moved, is made again there."""
        async def call(function: str, *args: Any, **kwargs: Any) -> Any:
            used = client.url
            try:
                return await client.call(function, *args, **kwargs)
            except RewardCallError as e:
                if e.status is not None or await self.locate() == used:  # an answer came, or it did not move
                    raise
            client.url = self.url
            return await client.call(function, *args, **kwargs)
        return call

    @property
    def running(self) -> bool:
        return self.actor is not None

    async def stop(self) -> None:
        """Stop the endpoint and its workers, then its actor (idempotent)."""
        import ray

        actor, self.actor = self.actor, None
        if actor is None or not ray.is_initialized():
            return
        try:  # SIGTERM first: the endpoint stops its workers as it exits
            await asyncio.wait_for(asyncio.wrap_future(actor.stop.remote(5.0).future()), 10.0)
        except (asyncio.TimeoutError, ray.exceptions.RayError) as e:
            log.warning("reward endpoint on Ray did not stop cleanly (%s); killing it", type(e).__name__)
        ray.kill(actor, no_restart=True)
