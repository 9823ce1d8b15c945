"""Engine-side linear layers on the CPU through oneDNN with weights prepacked once.

``F.linear`` on the CPU runs fp32 through MKL's sgemm, which on some CPUs (AMD EPYC here) is several times slower
than oneDNN for the engine's shapes (a few to a few hundred rows); prepacking the weight into oneDNN's blocked
layout also saves a reorder per call in bf16. ``tools/bench/cpu_linear.py`` measures both paths per dtype and
names the CPU; BENCHMARKS.md keeps its figures. Same accumulation in fp32: outputs equal ``F.linear``'s in our
tests.

Whether the packed path runs is decided per dtype by what the CPU supports (``rollart.cpu_features``: oneDNN's
bf16 kernels need avx512bw/vl/dq or avx_ne_convert) and one trial pack of a small weight, once per process;
where it cannot, ``F.linear`` serves that dtype with the same outputs. ``ROLLART_PORTABLE_CPU=1`` forces the
fallback for every dtype.

The packed copies live next to the weights (one more copy of every matrix the engine multiplies by, on the
CPU only) and go stale when the weights change in place: the engine repacks after every weight update.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from rollart.cpu_features import PORTABLE_ENV, cpu_features

FALLBACK = "F.linear"
PACKED = "oneDNN packed"


@functools.cache
def unavailable(dtype: torch.dtype) -> str:
    """Why the packed path cannot serve ``dtype`` on this CPU, or '' where it can (asked once per dtype)."""
    cpu = cpu_features()
    if cpu.forced_portable:
        return f"{PORTABLE_ENV}=1"
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return "torch built without oneDNN"
    if dtype == torch.bfloat16 and not cpu.onednn_bf16:
        return "oneDNN bf16 needs avx512bw+avx512vl+avx512dq or avx_ne_convert"
    if dtype == torch.float16 and not cpu.onednn_fp16:
        return "oneDNN fp16 needs avx512_fp16 or amx_fp16"
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(8, 16, generator=g).to(dtype), torch.randn(2, 16, generator=g).to(dtype)
    try:  # the CPU queries above are torch's; a trial pack catches what they do not know
        y = torch.ops.mkldnn._linear_pointwise(x, torch.ops.mkldnn._reorder_linear_weight(w, 2), None, "none", [], "")
    except RuntimeError as e:
        return f"trial pack failed: {str(e).splitlines()[0]}"
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    if not torch.allclose(y.float(), F.linear(x, w).float(), rtol=tol, atol=tol):
        return "trial pack gave outputs unlike F.linear's"
    return ""


def path(device: torch.device, dtype: torch.dtype) -> str:
    """The linear path that serves ``dtype`` on ``device``: ``PACKED`` or ``FALLBACK``."""
    return PACKED if device.type == "cpu" and not unavailable(dtype) else FALLBACK


def describe(dtype: torch.dtype) -> str:
    """One line for the engine's start: which path serves which dtype on this CPU, and why not where not."""
    parts = []
    for d in (torch.float32, torch.bfloat16):
        why = unavailable(d)
        parts.append(f"{str(d).removeprefix('torch.')} -> {FALLBACK} ({why})" if why else
                     f"{str(d).removeprefix('torch.')} -> {PACKED}")
    return f"CPU linears on {cpu_features().describe()}: {', '.join(parts)}; this engine runs {str(dtype).removeprefix('torch.')}"


class PackedLinears:
    """``linear(x, weight, bias)`` that uses the packed copy of a weight it was given in ``pack``; any other
    weight goes to ``F.linear``. What packs and what multiplies are given: oneDNN's (:meth:`onednn`) or rollart's C
    kernels' (``rollart.models.cpu_kernels.Kernels.linears``)."""

    def __init__(self, pack: Callable[[Tensor], Tensor], apply: Callable[[Tensor, Tensor, Tensor, Tensor | None], Tensor]):
        """``pack(weight) -> packed``; ``apply(x, packed, weight, bias) -> x @ weight.T + bias``."""
        self._pack, self._apply = pack, apply
        self._packed: dict[int, tuple[Tensor, Tensor]] = {}
        self.generation = 0
        """How many times :meth:`pack` ran: what holds on to packed copies rebuilds when it moved."""

    @classmethod
    def onednn(cls, batch_hint: int) -> "PackedLinears":
        """oneDNN's blocked layout for about ``batch_hint`` rows."""
        return cls(lambda w: torch.ops.mkldnn._reorder_linear_weight(w, batch_hint),
                   lambda x, packed, w, bias: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], ""))

    def pack(self, weights: list[Tensor]) -> None:
        """(Re)pack every weight: call again whenever their values change."""
        self._packed = {}
        with torch.no_grad():
            for w in weights:
                self._packed[id(w)] = (w, self._pack(w.detach()))
        self.generation += 1

    def packed_of(self, weight: Tensor) -> Tensor | None:
        """The packed copy of ``weight``, or None where it has none (never packed, or replaced since)."""
        hit = self._packed.get(id(weight))
        return hit[1] if hit is not None and hit[0] is weight else None

    def __call__(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        hit = self._packed.get(id(weight))
        if hit is None or hit[0] is not weight or x.dim() != 2 or x.dtype != weight.dtype:
            return F.linear(x, weight, bias)
        return self._apply(x, hit[1], weight, bias)
