"""Every decoder layer of a CPU engine step in one call into rollart's C kernels (``rl_decoder_layers``).

The model's layer loop (``CausalLM.forward_paged``) calls about twenty Python functions and torch ops a layer:
norms, residual adds, views, output tensors, one ctypes call per kernel. At a decode step each of them finds its
code and data evicted by the weights the matmul before it streamed through the caches, and pays for it: an
RMSNorm of 16 rows that takes 18 us warm took 95 us after a 20-MB stream on an AMD EPYC (2026-12-03). So where a
step's matmuls stay in the C kernels (fewer than ``GEMM_ROWS`` rows: decodes and short prefill chunks) the same
kernels run every layer in C, one after the other, on the same values; the loop serves every other step and every
model this does not fit (:meth:`DecoderLayers.unfit` says why).
"""
from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from rollart.models.cpu_linear import PackedLinears

LAYER_FIELDS = ("ln_in", "qkv", "qkv_bias", "q_norm", "k_norm", "o", "ln_post", "gate_up", "down")


class LayerPointers(ctypes.Structure):
    """One layer's weights as ``rl_layer`` in csrc/cpu_kernels.c reads them."""
    _fields_ = [(name, ctypes.c_void_p) for name in LAYER_FIELDS]


class DecoderLayers:
    """``PagedOps.layers`` for a model whose matmuls ``packed`` (the C kernels' ``PackedLinears``) serves."""

    def __init__(self, lib, dtypes: dict[torch.dtype, int], model, packed: PackedLinears, to_torch_rows: int | None):
        """``lib``: the loaded kernels library; ``dtypes``: the dtypes it reads and their codes; ``to_torch_rows``: from
        this many rows on the step's matmuls go to torch's GEMM, so the loop serves it (None: C takes every step)."""
        self.lib, self.dtypes, self.model, self.packed, self.to_torch_rows = lib, dtypes, model, packed, to_torch_rows
        self.generation = -1
        self.table: ctypes.Array | None = None
        self.reason = ""
        self.held: list[Tensor] = []
        """Tensors made for the table (biases in the weights' dtype), alive while it points at them."""

    def unfit(self) -> str:
        """Why the model's layers cannot run in one call ('' where they can), for the weights packed now."""
        self._refresh()
        return self.reason

    @torch.no_grad()  # the stacked projections count as stacked only where no gradient is wanted
    def _refresh(self) -> None:
        if self.generation == self.packed.generation:
            return
        self.generation = self.packed.generation
        self.table, self.reason, self.held = None, "", []
        rows = []
        for i, layer in enumerate(self.model.model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            parts = [attn.qkv_weight if attn._fused_ok() else None, attn.o_proj.weight,
                     getattr(mlp, "gate_up_weight", None), mlp.down_proj.weight]
            packed = [self.packed.packed_of(w) if w is not None else None for w in parts]
            norms = [layer.input_layernorm.weight, layer.post_attention_layernorm.weight]
            if attn.qk_norm:
                norms += [attn.q_norm.weight, attn.k_norm.weight]
            why = ("an o_proj bias" if attn.o_proj.bias is not None
                   else "a weight without its packed copy" if any(p is None for p in packed)
                   else "norm weights of another dtype" if any(n.dtype != parts[1].dtype or not n.is_contiguous()
                                                                for n in norms) else "")
            if why:
                self.reason = f"layer {i} has {why}"
                return
            bias = attn.qkv_bias.to(parts[1].dtype).contiguous() if attn.qkv_bias is not None else None
            if bias is not None:
                self.held.append(bias)
            qk = [n.data_ptr() for n in norms[2:]] or [None, None]
            rows.append(LayerPointers(norms[0].data_ptr(), packed[0].data_ptr(),
                                      bias.data_ptr() if bias is not None else None, *qk, packed[1].data_ptr(),
                                      norms[1].data_ptr(), packed[2].data_ptr(), packed[3].data_ptr()))
        self.table = (LayerPointers * len(rows))(*rows)

    def __call__(self, x: Tensor, cos: Tensor, sin: Tensor, kv_cache: Tensor, batch) -> Tensor | None:
        """x (N, h) after every layer (computed in place), or None where this step takes the layer loop."""
        v, N = batch.varlen, x.shape[0]
        if (v is None or v.kernel != "cpu" or x.dtype not in self.dtypes
                or (self.to_torch_rows and N >= self.to_torch_rows)):
            return None
        self._refresh()
        cfg = self.model.config
        H, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        if (self.table is None or cos.shape != (N, 1, D) or cos.stride() != sin.stride() or cos.stride(-1) != 1
                or cos.dtype != x.dtype or not kv_cache.is_contiguous() or kv_cache.dtype != x.dtype
                or kv_cache.shape[0] != len(self.table)):
            return None
        x = x.contiguous()
        slots, query_start, context_lens = (batch.slot_mapping.contiguous(), v.query_start.contiguous(),
                                            v.context_lens.contiguous())
        tables = v.block_tables if v.block_tables.stride(-1) == 1 else v.block_tables.contiguous()
        rc = self.lib.rl_decoder_layers(
            self.table, len(self.table), x.data_ptr(), N, cfg.hidden_size, H, Hkv, D, cfg.intermediate_size,
            cos.data_ptr(), sin.data_ptr(), cos.stride(0), slots.data_ptr(), kv_cache.data_ptr(), kv_cache.stride(1),
            tables.data_ptr(), tables.stride(0), query_start.data_ptr(), context_lens.data_ptr(),
            context_lens.shape[0], kv_cache.shape[3], D ** -0.5, cfg.rms_norm_eps, self.dtypes[x.dtype],
            torch.get_num_threads())
        if rc != 0:
            raise RuntimeError(f"rl_decoder_layers failed (code {rc}: {'bad shapes' if rc == -1 else 'out of memory'})")
        return x
