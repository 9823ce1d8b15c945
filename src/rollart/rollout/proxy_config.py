"""LLMProxy settings and the errors its callers see (see ``rollart.rollout.proxy``)."""
from __future__ import annotations

from dataclasses import dataclass, field

AUTO = "auto"
"""hw_affinity value that hands the mapping to the online profiler."""

from rollart.config import ConfigError
from rollart.types import InvalidRequestError


class UnknownTaskError(InvalidRequestError):
    """A generate() task that hw_affinity does not map (and there is no 'default' entry)."""


class NoWorkerError(RuntimeError):
    """No live inference worker can serve a request (all dead, or none of a compatible class)."""


@dataclass
class ProxyConfig:
    """LLMProxy settings."""
    hw_affinity: dict | str = field(default_factory=dict)
    """task -> hardware class (as in @hw_mapping), e.g. {"FrozenLake": "H800", "default": "H20"}; 'default'
    serves other tasks. Empty: every task, any worker. "auto": the online profiler
    (rollart.rollout.profiler) measures each task on each class and applies the mapping it proposes, revising
    it as the task mix changes (tasks it has not mapped yet go to any worker)."""
    fallback: dict = field(default_factory=dict)
    """class -> ordered list of compatible classes used when it has no live worker. A class missing here
    uses rollart.distributed.hardware.fallbacks (GPU classes of the same strength first; unknown classes:
    any other class); map it to [] to forbid fallback."""
    spill_ratio: float = 0.0
    """Load-aware affinity. 0: strict (a task's requests only go to its class, or a fallback when that class
    has no live worker). r >= 1: a request with no sticky worker overflows to the least-loaded worker of a
    fallback class when the least-loaded worker of its own class has more than r times that worker's
    outstanding tokens -- so a saturated class (e.g. one H20 taking every decode-heavy task) does not
    leave the others idle. Sticky trajectories stay where their prefix cache is."""
    sticky: bool = True
    """Send a trajectory's next turn to the worker that served its previous one (prefix-cache reuse)."""
    max_sticky: int = 100_000
    """Trajectories whose sticky worker is remembered (least recently served forgotten first; release()
    forgets a finished one at once)."""
    max_worker_failures: int = 3
    """Deaths of one worker after which the proxy stops using it and reroutes its requests."""
    restart_timeout_s: float = 30.0
    """How long to wait for a dead worker to come back (restarted in place) before rerouting."""
    max_attempts: int = 8
    """Times one request is issued (first try + retries after worker deaths) before it fails."""
    resync_weights: bool = True
    """Tell a worker restarted without the latest weights their version and the weight store's address before
    reusing it; it pulls them itself (the proxy keeps no copy of the weights)."""
    pd_prefill_class: str = ""
    """PD disaggregation: hardware class that runs prefill (with pd_decode_class; both empty = off)."""
    pd_decode_class: str = ""
    """PD disaggregation: hardware class that runs decode."""
    pd_kv_transport: str = "auto"
    """How the prompt's K/V reaches the decode worker: frames (zero-copy actor frames) | ipc (CUDA IPC handle,
    same node) | auto (ipc where the prefill worker's cache is on a GPU, else frames)."""

    def __post_init__(self) -> None:
        if isinstance(self.hw_affinity, str) and self.hw_affinity != AUTO:
            raise ConfigError(f"proxy.hw_affinity={self.hw_affinity!r}: give 'auto' (the online profiler picks the "
                              "mapping) or a JSON object of task -> hardware class, e.g. '{\"FrozenLake\": \"H800\"}'")
        if not isinstance(self.hw_affinity, (dict, str)):
            raise ConfigError(f"proxy.hw_affinity={self.hw_affinity!r}: give 'auto' or a JSON object of task -> "
                              "hardware class")
        if self.max_worker_failures < 1 or self.max_attempts < 1 or self.restart_timeout_s <= 0 or self.max_sticky < 1:
            raise ConfigError("max_worker_failures, max_attempts and max_sticky must be >= 1, restart_timeout_s > 0")
        if bool(self.pd_prefill_class) != bool(self.pd_decode_class):
            raise ConfigError("PD disaggregation needs both pd_prefill_class and pd_decode_class "
                              f"(got {self.pd_prefill_class!r} / {self.pd_decode_class!r})")
        if self.pd_kv_transport not in ("frames", "ipc", "auto"):
            raise ConfigError(f"pd_kv_transport={self.pd_kv_transport!r}: choose frames, ipc or auto")
        if self.spill_ratio != 0 and self.spill_ratio < 1:
            raise ConfigError(f"spill_ratio must be 0 (strict hw_affinity) or >= 1, got {self.spill_ratio}")
        for cls, alts in self.fallback.items():
            if not isinstance(alts, (list, tuple)):
                raise ConfigError(f"fallback[{cls!r}] must be a list of hardware classes, got {alts!r}")
