"""The Ray backend (``cluster.backend=ray``): Ray places, restarts on a surviving node and tears down the run's
actor processes; the data plane stays ZeroMQ + msgpack.

    backend = RayBackend(ClusterConfig(backend="ray", address="auto"), rm, slots, run_dir)
    await backend.start()               # join Ray, one placement group per hardware class, bind address
    system = ActorSystem(bind=backend.bind, curve_dir=backend.curve_dir, launcher=backend.launch)

Each hardware class of the run's ResourceManager becomes a placement group with one bundle per worker slot:
``{"H800": k, "GPU": k * gpus_per_device, "CPU": cpus_per_actor}`` (the class is a custom resource that
nodes declare, ``ray start --resources '{"H800": 8}'``; ``num_gpus`` makes Ray set CUDA_VISIBLE_DEVICES), and
``{"CPU": cpus_per_actor}`` for the ``cpu`` class. An actor started through a Cluster is found by name among
the ResourceManager's bindings and started in the bundle that holds its devices, as a thin Ray actor
(:class:`~rollart.distributed.ray_host.ActorHost`) that runs ``python -m rollart.actors.serve`` there.

Losing a node: its actor processes die with their hosts; the coordinator's supervisor restarts them (their
``RestartPolicy``) in the same bundles, which Ray reschedules onto surviving nodes of the class; while no
node has the capacity the restart waits, saying so in one line. Where each incarnation ran is written to
``<run_dir>/placement.json``.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from rollart.actors.launch import LaunchConfig, serve_args
from rollart.config import ConfigError
from rollart.distributed.cluster_config import ClusterConfig
from rollart.distributed.resources import ResourceManager

log = logging.getLogger("rollart.distributed")

CPU_CLASS = "cpu"


class RayProcess:
    """A process-like view (``pid``, ``returncode``, ``wait()``, ``kill()``) of one actor process on a Ray node."""

    def __init__(self, host: Any, info: dict):
        self.host = host
        self.info = info
        self.pid = None  # the actor's HELLO tells its pid
        self.on_this_host = info["host"] == socket.gethostname()
        """Whether this machine's /proc shows the process (liveness looks there to tell busy from hung)."""
        self.returncode: int | None = None
        self.where = f"process {info['pid']} on Ray node {info['node_id'][:12]} ({info['host']})"
        self._exit_task: asyncio.Future | None = None

    async def wait(self) -> int:
        if self._exit_task is None:
            self._exit_task = asyncio.ensure_future(self._wait_exit())
        return await asyncio.shield(self._exit_task)

    async def _wait_exit(self) -> int:
        import ray

        try:
            rc = await self.host.wait.remote()
        except ray.exceptions.RayError as e:  # its host died: the node was lost, or it was killed
            log.warning("%s: its Ray host is gone (%s)", self.where, type(e).__name__)
            rc = -9
        else:  # the process died but its host lives on, holding the bundle the restart is placed in: free it
            ray.kill(self.host, no_restart=True)
        self.returncode = rc
        return rc

    def kill(self) -> None:
        import ray

        ray.kill(self.host, no_restart=True)


class RayBackend:
    def __init__(self, cfg: ClusterConfig, resources: ResourceManager, slots: dict[str, list[list]],
                 run_dir: str | Path | None = None):
        """``slots``: per hardware class, the device ids of each worker slot (one placement-group bundle each);
        a binding of ``resources`` is started in the bundle holding its devices."""
        self.cfg = cfg
        self.rm = resources
        self.slots = {hw: [list(s) for s in ss] for hw, ss in slots.items() if ss}
        self.run_dir = Path(run_dir) if run_dir else None
        self.bind = "tcp://127.0.0.1:0"
        """Where the coordinator's ActorSystem binds (after start)."""
        self.curve_dir: str | None = None
        """CURVE keys of this run when the coordinator listens beyond loopback (after start)."""
        self.placement_groups: dict[str, Any] = {}
        self.placements: dict[str, list[dict]] = {}
        """Actor name -> where each of its incarnations ran (hw_class, node_id, host, pid, bundle)."""
        self.gpus_per_device = 0.0
        self._client_keys: dict | None = None
        self._started_ray = False
        self._host_cls: Any = None
        self._hosts: list = []

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> "RayBackend":
        import ray
        from ray.util.placement_group import placement_group

        # 1) join the cluster, or start a local one whose resources are the run's classes
        if not ray.is_initialized():
            if self.cfg.address:
                ray.init(address=self.cfg.address, include_dashboard=False, logging_level=logging.WARNING)
            else:
                need = self._demand()
                ray.init(resources={hw: n for hw, n in need.items() if hw not in ("CPU", "GPU")},
                         num_cpus=max(int(need.get("CPU", 1) + 0.999), os.cpu_count() or 1),
                         include_dashboard=False, logging_level=logging.WARNING)
            self._started_ray = True
        try:
            total = ray.cluster_resources()
            self.gpus_per_device = (self.cfg.gpus_per_device if self.cfg.gpus_per_device >= 0
                                    else 1.0 if total.get("GPU", 0) > 0 else 0.0)
            # 2) the run must fit the cluster (by totals; Ray packs the bundles)
            for resource, n in self._demand().items():
                if total.get(resource, 0) < n:
                    raise ConfigError(
                        f"cluster.backend=ray: the run needs {n:g} x {resource} but the Ray cluster has "
                        f"{total.get(resource, 0):g} (nodes declare a class with `ray start --resources "
                        f"'{{\"{resource}\": N}}'`); add nodes or lower num_inference_workers / the plan")
            # 3) one placement group per hardware class, one bundle per worker slot
            for hw, slots in sorted(self.slots.items(), key=lambda kv: kv[0] == CPU_CLASS):  # classes first
                pg = placement_group([self._bundle(hw, len(s)) for s in slots], strategy="SPREAD",
                                     name=f"rollart-{os.getpid()}-{hw}")
                self.placement_groups[hw] = pg
                await self._until(asyncio.wrap_future(pg.ready().future()),
                                  f"placement group for {len(slots)} x {hw} is not placed yet: waiting for capacity")
            # 4) where actors connect: loopback when every node is this machine, else this node's IP + CURVE
            self._host_cls = ray.remote(max_restarts=0)(_actor_host_class())
            self._set_bind_address()
        except BaseException:
            await self.close()
            raise
        log.info("ray backend: %d placement group(s) %s; actors connect to %s%s", len(self.placement_groups),
                 {hw: len(s) for hw, s in self.slots.items()}, self.bind, " (CURVE)" if self.curve_dir else "")
        return self

    async def close(self) -> None:
        """Kill any actor host still up, remove the placement groups, and stop Ray if this run started it."""
        import ray

        if not ray.is_initialized():
            return
        for host in self._hosts:
            try:
                ray.kill(host, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._hosts.clear()
        from ray.util.placement_group import remove_placement_group

        for pg in self.placement_groups.values():
            try:
                remove_placement_group(pg)
            except Exception as e:  # noqa: BLE001 - tearing down: report and go on
                log.warning("removing a placement group: %s", e)
        self.placement_groups.clear()
        if self.curve_dir:
            shutil.rmtree(self.curve_dir, ignore_errors=True)
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    # -- the launcher ---------------------------------------------------------------------------
    async def launch(self, cfg: LaunchConfig, name: str, cls_path: str, identity: bytes, env: dict) -> RayProcess:
        """Start one incarnation of actor ``name`` on a Ray node (``rollart.actors.launch.Launcher``)."""
        import ray

        hw, options, bundle = self._options(name, env)
        host = self._host_cls.options(**options).remote()
        self._hosts.append(host)
        extra = {k: str(v) for k, v in env.items()}
        if cfg.torch_threads > 0:
            extra.update(OMP_NUM_THREADS=str(cfg.torch_threads), MKL_NUM_THREADS=str(cfg.torch_threads))
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        ref = host.start.remote(serve_args(cfg, name, cls_path, identity), extra, paths, self._client_keys)
        try:
            info = await self._until(asyncio.wrap_future(ref.future()),
                                     f"actor {name} ({hw}) is not placed yet: the run waits until a Ray node "
                                     f"with free {hw} capacity joins")
        except BaseException:
            if ray.is_initialized():  # a run that ends while this actor waits for capacity: drop the request
                ray.kill(host, no_restart=True)
            raise
        record = {"incarnation": len(self.placements.get(name, [])) + 1, "hw_class": hw, "bundle": bundle, **info}
        self.placements.setdefault(name, []).append(record)
        log.info("ray backend: %s (%s) placed on node %s (%s), pid %s", name, hw, info["node_id"][:12],
                 info["host"], info["pid"])
        self._write_placements()
        return RayProcess(host, info)

    # -- helpers --------------------------------------------------------------------------------
    def _demand(self) -> dict[str, float]:
        need: dict[str, float] = {}
        for hw, slots in self.slots.items():
            for s in slots:
                for k, v in self._bundle(hw, len(s)).items():
                    need[k] = need.get(k, 0) + v
        return need

    def _bundle(self, hw: str, devices: int) -> dict[str, float]:
        bundle = {"CPU": self.cfg.cpus_per_actor}
        if hw != CPU_CLASS:
            bundle[hw] = devices
            if self.gpus_per_device > 0:
                bundle["GPU"] = devices * self.gpus_per_device
        return bundle

    def _options(self, name: str, env: dict) -> tuple[str, dict, int | None]:
        """Ray actor options for ``name``: in its bundle when the run's ResourceManager bound it, else by
        resources alone (e.g. env hosts of a pool started on this system)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        binding = next((b for b in self.rm.bindings if b.owner == name), None)
        hw = binding.hw_class if binding else env.get("ROLLART_HW_CLASS", CPU_CLASS)
        devices = list(binding.devices) if binding else []
        resources = self._bundle(hw, max(len(devices), 1))
        options: dict[str, Any] = {"num_cpus": resources.pop("CPU"), "num_gpus": resources.pop("GPU", 0),
                                   "resources": resources}
        for i, slot in enumerate(self.slots.get(hw, [])):
            if devices and slot == devices:
                pg = self.placement_groups.get(hw)
                if pg is None:  # close() removed it: a restart that wakes during teardown has nowhere to go
                    raise RuntimeError(f"actor {name} ({hw}) not started: the ray backend is closed (its {hw} "
                                       "placement group was removed)")
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
                return hw, options, i
        return hw, options, None

    async def _until(self, fut: asyncio.Future, waiting: str) -> Any:
        """Await ``fut``; if it takes longer than capacity_wait_log_s, say ``waiting`` once."""
        done, _ = await asyncio.wait({fut}, timeout=self.cfg.capacity_wait_log_s)
        if not done:
            log.warning("%s", waiting)
        return await fut

    def _set_bind_address(self) -> None:
        import ray

        from rollart.actors.curve import is_loopback

        host = self.cfg.bind_host
        if not host:
            here = ray.util.get_node_ip_address()
            nodes = [n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")]
            host = "127.0.0.1" if all(a == here or is_loopback(f"tcp://{a}:0") for a in nodes) else here
        self.bind = f"tcp://{host}:0"
        if is_loopback(self.bind):
            return
        import zmq.auth

        self.curve_dir = tempfile.mkdtemp(prefix="rollart-curve-")
        from rollart.actors.curve import SERVER_PAIRS

        for pair in (*SERVER_PAIRS, "client"):
            zmq.auth.create_certificates(self.curve_dir, pair)
        os.makedirs(os.path.join(self.curve_dir, "authorized"))
        shutil.copy(os.path.join(self.curve_dir, "client.key"), os.path.join(self.curve_dir, "authorized"))
        self._client_keys = {}
        # never the coordinator's secret; the weight plane's keypair, as every actor may serve weights
        for name in ("server.key", "client.key", "client.key_secret", "weights.key", "weights.key_secret",
                     "authorized/client.key"):
            with open(os.path.join(self.curve_dir, name)) as f:
                self._client_keys[name] = f.read()

    def _write_placements(self) -> None:
        if self.run_dir is None:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.run_dir / "placement.json.tmp"
        tmp.write_text(json.dumps(self.placements, indent=1) + "\n")
        os.replace(tmp, self.run_dir / "placement.json")


def _actor_host_class() -> type:
    from rollart.distributed.ray_host import ActorHost

    return ActorHost
