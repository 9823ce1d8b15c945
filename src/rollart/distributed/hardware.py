"""Which hardware class serves which role, and which class stands in for which (RollArt §4.1, §5.2).

The classes themselves are the catalogue's (rollart.hardware.HARDWARE). On CPU-only machines these labels
name the CPU processes that play each class: routing, placement and fallback are real, the speeds are not.
"""
from __future__ import annotations

from rollart.hardware import HARDWARE, HardwareSpec

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
                       "(register more with rollart.hardware.HARDWARE[name] = HardwareSpec(...))") from None


def rank_for(need: str, candidates: list[str]) -> list[str]:
    """Candidates ordered best-first for a need: 'compute' | 'bandwidth' | a class name | 'cpu' | 'serverless'."""
    gpus = [c for c in candidates if spec(c).kind == "gpu"]
    if need == "compute":
        return sorted(gpus, key=lambda c: (-spec(c).tflops, spec(c).relative_cost))
    if need == "bandwidth":
        return sorted(gpus, key=lambda c: (-spec(c).hbm_gb_s, spec(c).relative_cost))
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
        key = (lambda c: -spec(c).tflops) if compute_heavy else (lambda c: -spec(c).hbm_gb_s)
        return sorted(gpus, key=key)
    if s.kind == "serverless":
        return [c for c in others if spec(c).kind == "cpu"]
    return []
