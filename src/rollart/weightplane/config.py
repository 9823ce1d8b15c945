"""WeightPlaneConfig: how a run moves weight versions (``weights.*`` on the command line). Imports no torch."""
from __future__ import annotations

from dataclasses import dataclass

from rollart.config import ConfigError


@dataclass
class WeightPlaneConfig:
    cuda_ipc: bool = True
    """Inference workers on the trainer's node whose weights live on a GPU open the trainer's CUDA IPC
    buckets instead of pulling copies; where that cannot work a worker says so in one log line and pulls
    copies. Off: always copies."""
    relay_fanout: int = 1
    """Workers each worker forwards a version to (1: a chain store -> w0 -> w1 -> ...; the store feeds one
    worker whatever the fan-out, so its egress is one model per version)."""
    timeout_s: float = 30.0
    """Seconds a bucket (or manifest) may take to arrive before it counts as lost and is asked for again. It
    bounds each request of every pull (the store's from the trainer, each worker's from its relay parent or the
    store, a restarted worker's own), not the pull: one that keeps receiving is never cut, one whose source stops
    answering fails after (retries + 1) x timeout_s in one line naming the version, the source and this setting."""
    retries: int = 3
    """Times one lost or corrupt bucket is asked for again (parent, then store) before the pull fails."""

    def __post_init__(self) -> None:
        if not (isinstance(self.relay_fanout, int) and self.relay_fanout >= 1):
            raise ConfigError(f"weights.relay_fanout={self.relay_fanout!r} must be an int >= 1 (1: a relay chain)")
        if not self.timeout_s > 0:
            raise ConfigError(f"weights.timeout_s={self.timeout_s!r} must be > 0")
        if not (isinstance(self.retries, int) and self.retries >= 0):
            raise ConfigError(f"weights.retries={self.retries!r} must be an int >= 0")
