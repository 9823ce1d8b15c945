"""ClusterConfig: where a run's actor processes start — on this machine (``local``) or on a Ray cluster (``ray``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rollart.config import ConfigError

INSTALL_HINT = "cluster.backend=ray needs Ray: pip install -e \".[ray]\" (or pip install 'ray>=2.60'); or use cluster.backend=local"


@dataclass
class ClusterConfig:
    """How actor processes are started and placed. The data plane is ZeroMQ + msgpack either way."""
    backend: Literal["local", "ray"] = "local"
    """local: every actor is a child process of the coordinator. ray: Ray places each actor process on a node of
    its hardware class (placement groups over custom resources named like the class, e.g. H800, H20)."""
    address: str = ""
    """Ray cluster to join: "auto" (the one `ray start` made this machine part of) or the head's "HOST:PORT".
    Empty: start a local Ray with the run's hardware classes as custom resources."""
    gpus_per_device: float = -1.0
    """GPUs Ray reserves per device of a GPU class (it sets CUDA_VISIBLE_DEVICES from them). -1: 1 when the Ray
    cluster has GPUs, else 0 (CPU clusters, where the classes are labels)."""
    cpus_per_actor: float = 1.0
    """Logical CPUs Ray reserves for each actor process."""
    bind_host: str = ""
    """Address this coordinator listens on for its actors. Empty: 127.0.0.1 when every Ray node is this machine,
    else this node's IP (then ZeroMQ CURVE keys are made for the run and handed to each actor)."""
    capacity_wait_log_s: float = 10.0
    """An actor still not placed after this long is reported in one line (the run waits for capacity)."""

    def __post_init__(self) -> None:
        if self.backend not in ("local", "ray"):
            raise ConfigError(f"cluster.backend={self.backend!r}: choose local or ray")
        if self.backend == "local" and (self.address or self.bind_host):
            raise ConfigError("cluster.address / cluster.bind_host apply to cluster.backend=ray only: set "
                              "cluster.backend=ray, or drop them")
        if self.gpus_per_device < 0 and self.gpus_per_device != -1:
            raise ConfigError(f"cluster.gpus_per_device={self.gpus_per_device}: a GPU count >= 0, or -1 (auto)")
        if not self.cpus_per_actor > 0:
            raise ConfigError(f"cluster.cpus_per_actor={self.cpus_per_actor} must be > 0")
        if not self.capacity_wait_log_s > 0:
            raise ConfigError(f"cluster.capacity_wait_log_s={self.capacity_wait_log_s} must be > 0")

    def check_installed(self) -> None:
        """Raise ConfigError (one line, naming the extra) when ``backend=ray`` and Ray is not importable."""
        if self.backend != "ray":
            return
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError(INSTALL_HINT) from None
