"""Engine-side linear layers on the CPU through oneDNN with weights prepacked once.

``F.linear`` on the CPU runs fp32 through MKL's sgemm, which on some CPUs (AMD EPYC here) is several times slower
than oneDNN for the engine's shapes (a few to a few hundred rows); prepacking the weight into oneDNN's blocked
layout also saves a reorder per call in bf16. Measured on this machine, one thread, 16 x 576 -> 3072: fp32
0.73 -> 0.25 ms, bf16 0.20 -> 0.13 ms; the 49152-row lm_head 47 -> 12 ms (fp32). Same accumulation in fp32:
outputs equal ``F.linear``'s in our tests.

The packed copies live next to the weights (one more copy of every matrix the engine multiplies by, on the
CPU only) and go stale when the weights change in place: the engine repacks after every weight update.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def available(device: torch.device) -> bool:
    return device.type == "cpu" and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                                                      "_linear_pointwise")


class PackedLinears:
    """``linear(x, weight, bias)`` that uses the packed copy of a weight it was given in ``pack``; any other
    weight goes to ``F.linear``."""

    def __init__(self, batch_hint: int):
        self.batch_hint = batch_hint
        self._packed: dict[int, tuple[Tensor, Tensor]] = {}

    def pack(self, weights: list[Tensor]) -> None:
        """(Re)pack every weight: call again whenever their values change."""
        self._packed = {}
        with torch.no_grad():
            for w in weights:
                self._packed[id(w)] = (w, torch.ops.mkldnn._reorder_linear_weight(w.detach(), self.batch_hint))

    def __call__(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        hit = self._packed.get(id(weight))
        if hit is None or hit[0] is not weight or x.dim() != 2 or x.dtype != weight.dtype:
            return F.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, hit[1], bias, "none", [], "")
