"""Hardware classes a ResourceManager can hold, and which class stands in for which.

H20 / H800 figures are RollArt Table 2 (cost normalised to H20 = 1.00). A100 / L40S / L4 are
NVIDIA datasheet figures (dense BF16 TFLOPS); their relative costs are rough rental-price ratios added
by us, not from the paper. On CPU-only machines these labels name the CPU processes that play each
class: routing, placement and fallback are real, the speeds are not.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    kind: str
    """'gpu' | 'cpu' | 'serverless'"""
    tflops: float = 0.0
    """Dense BF16 TFLOPS (what prefill and training are bound by)."""
    hbm_gb: float = 0.0
    hbm_gbps: float = 0.0
    """HBM bandwidth in GB/s (what decoding is bound by)."""
    nvlink_gbps: float = 0.0
    relative_cost: float = 0.0
    """Cost per device-hour relative to an H20."""

    @property
    def flops_per_byte(self) -> float:
        """Compute/bandwidth ratio: high = compute-optimized (prefill, training), low = bandwidth-optimized."""
        return self.tflops * 1e3 / self.hbm_gbps if self.hbm_gbps else 0.0


HARDWARE: dict[str, HardwareSpec] = {
    "H800": HardwareSpec("H800", "gpu", tflops=989.5, hbm_gb=80, hbm_gbps=3350, nvlink_gbps=400, relative_cost=2.85),
    "H20": HardwareSpec("H20", "gpu", tflops=148, hbm_gb=96, hbm_gbps=4000, nvlink_gbps=900, relative_cost=1.00),
    "A100": HardwareSpec("A100", "gpu", tflops=312, hbm_gb=80, hbm_gbps=2039, nvlink_gbps=600, relative_cost=1.6),
    "L40S": HardwareSpec("L40S", "gpu", tflops=362, hbm_gb=48, hbm_gbps=864, nvlink_gbps=0, relative_cost=0.9),
    "L4": HardwareSpec("L4", "gpu", tflops=121, hbm_gb=24, hbm_gbps=300, nvlink_gbps=0, relative_cost=0.35),
    "cpu": HardwareSpec("cpu", "cpu"),
    "serverless": HardwareSpec("serverless", "serverless"),
}

ROLE_NEEDS = {
    "train": "compute",      # training: compute-optimized GPUs with fast interconnect
    "generate": "bandwidth",  # decode-bound generation: bandwidth-optimized GPUs
    "env": "cpu",            # stateful CPU-bound environments
    "reward": "serverless",  # stateless scoring: serverless, else local
}
"""Role -> what its default hardware should be good at (RollArt §4.1, §5.2)."""


def spec(name: str) -> HardwareSpec:
    try:
        return HARDWARE[name]
    except KeyError:
        raise KeyError(f"unknown hardware class {name!r}; known: {sorted(HARDWARE)} "
                       "(register more with rollart.distributed.hardware.HARDWARE[name] = HardwareSpec(...))") from None


def rank_for(need: str, candidates: list[str]) -> list[str]:
    """Candidates ordered best-first for a need: 'compute' | 'bandwidth' | a class name | 'cpu' | 'serverless'."""
    gpus = [c for c in candidates if spec(c).kind == "gpu"]
    if need == "compute":
        return sorted(gpus, key=lambda c: (-spec(c).tflops, spec(c).relative_cost))
    if need == "bandwidth":
        return sorted(gpus, key=lambda c: (-spec(c).hbm_gbps, spec(c).relative_cost))
    if need in ("cpu", "serverless"):
        return [c for c in candidates if spec(c).kind == need]
    return [need] if need in candidates else []


def fallbacks(name: str, candidates: list[str]) -> list[str]:
    """Compatible stand-ins for ``name`` among ``candidates``, best first (never ``name`` itself).

    A GPU class falls back to other GPUs, those good at the same thing first (a compute-optimized class
    to the next-highest TFLOPS, a bandwidth-optimized one to the next-highest HBM bandwidth); serverless
    falls back to local CPU; CPU has no stand-in.
    """
    s = spec(name)
    others = [c for c in candidates if c != name]
    if s.kind == "gpu":
        gpus = [c for c in others if spec(c).kind == "gpu"]
        compute_heavy = s.flops_per_byte >= 100  # H800 ~295, A100 ~153, L40S ~419 vs H20 ~37
        key = (lambda c: -spec(c).tflops) if compute_heavy else (lambda c: -spec(c).hbm_gbps)
        return sorted(gpus, key=key)
    if s.kind == "serverless":
        return [c for c in others if spec(c).kind == "cpu"]
    return []
