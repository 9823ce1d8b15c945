"""A prompt's K/V on the wire, for PD disaggregation (RollArt §6.3): the prefill engine packs it, the decode
engine unpacks it into its own paged cache.

Two transports, chosen by the prefill side (``GenerateRequest.export_kv``):
* ``frames``: the prompt's blocks gathered into one contiguous host tensor (L, 2, blocks, block_size, Hkv, D)
  inside ``KVBlocks.data``; the actor codec sends it as a zero-copy frame and the receiver gets a view of the
  received buffer, which it copies into its own blocks (whole blocks when both caches page alike).
* ``ipc``: the K/V stays in a device buffer of the prefill engine and ``KVBlocks.ipc`` carries its CUDA IPC
  handle (``rollart.weightplane.cuda``); a decode engine on the same node copies device to device. The
  prefill engine keeps its last ``IPC_KEEP`` exported buffers alive so the handle stays valid while the
  decode side opens it. Where it cannot be opened (another node, GPU not visible) the decode engine logs one
  line and computes those tokens itself: the output is the same, only slower.
``auto`` is ``ipc`` when the engine's cache lives on a GPU, else ``frames``.
"""
from __future__ import annotations

import logging
from collections import deque

import torch

from rollart.models import ModelConfig
from rollart.types import InvalidRequestError, KVBlocks

log = logging.getLogger(__name__)

TRANSPORTS = ("frames", "ipc", "auto")
IPC_KEEP = 64
"""Exported device buffers kept alive per engine (each is one prompt's K/V)."""


class KVExporter:
    """Packs finished prompts' K/V for the wire, keeping IPC-shared device buffers alive."""

    def __init__(self, device: torch.device):
        self.device = device
        self._alive: deque[torch.Tensor] = deque(maxlen=IPC_KEEP)

    def pack(self, kv: torch.Tensor, num_tokens: int, transport: str, version: int) -> KVBlocks:
        """kv (L, 2, blocks, block_size, Hkv, D) on the engine's device -> KVBlocks for ``transport``."""
        if transport == "auto":
            transport = "ipc" if self.device.type == "cuda" else "frames"
        dtype = str(kv.dtype).removeprefix("torch.")
        if transport == "ipc" and kv.device.type == "cuda":
            from rollart.weightplane.cuda import export_ipc, node_id
            kv = kv.contiguous()
            self._alive.append(kv)
            desc = dict(export_ipc(kv), nbytes=kv.numel() * kv.element_size())
            return KVBlocks(num_tokens=num_tokens, dtype=dtype, version=version, ipc=desc, node=node_id())
        return KVBlocks(num_tokens=num_tokens, dtype=dtype, version=version,
                        data=kv.cpu().contiguous())


def unpack(kv: KVBlocks, mc: ModelConfig, num_tokens: int, request_id: str, version: int) -> torch.Tensor | None:
    """The (L, 2, blocks, block_size, Hkv, D) tensor a KVBlocks carries (a view of the received frame, or the IPC buffer);
    None when it came from other weights than ``version`` or an IPC handle cannot be opened here (the tokens
    are then computed). Bad shapes raise InvalidRequestError."""
    if kv.version != version:
        log.info("request %r: K/V computed under weights v%d, this engine runs v%d; recomputing it",
                 request_id, kv.version, version)
        return None
    if kv.data is not None:
        data = kv.data
    elif kv.ipc is not None:
        from rollart.weightplane.buckets import WeightTransferError
        from rollart.weightplane.cuda import import_ipc, node_id
        if kv.node != node_id():
            log.warning("request %r: its K/V sits on another node's GPU (%s); computing it here", request_id, kv.node)
            return None
        try:
            data = import_ipc(kv.ipc)
        except WeightTransferError as e:
            log.warning("request %r: cannot open the prefill worker's K/V (%s); computing it here", request_id, e)
            return None
    else:
        raise InvalidRequestError(f"request {request_id!r}: KVBlocks carries neither data nor an IPC handle")
    want = (mc.num_hidden_layers, 2, mc.num_key_value_heads, mc.head_dim)
    shape = tuple(data.shape)
    if len(shape) != 6 or shape[:2] + shape[4:] != want or shape[2] * shape[3] < kv.num_tokens:
        raise InvalidRequestError(f"request {request_id!r}: K/V of shape {shape} does not fit this model (expects "
                                  f"(L, 2, blocks, block_size, Hkv, D) with {want} and room for {kv.num_tokens} "
                                  "tokens): prefill and decode workers must serve the same model")
    if not 0 < kv.num_tokens < num_tokens:
        raise InvalidRequestError(f"request {request_id!r}: K/V for {kv.num_tokens} tokens, but the request has "
                                  f"{num_tokens} (at least one token must be left to decode)")
    return data
