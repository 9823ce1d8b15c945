"""Decode steps replayed from CUDA graphs, one per batch-size bucket (CUDA and the kernel path only).

A decode step of a small model is bound by kernel launches (28 layers x ~15 kernels), so each bucket's whole
forward (embedding to logits) is captured once at start-up with static input buffers; a step copies its
inputs into the first rows, pads the rest of the bucket (context length 0: the attention kernel reads
nothing; K/V written to the cache's scratch block) and replays. All graphs share one memory pool, captured
largest first; a step's logits are consumed (sampled) before the next replay overwrites them.

``DecodeGraphs`` is given what it replays on (the model, the KV cache and its paging) by whoever owns them
(``ModelRunner.decode_graphs``); it knows nothing else of the runner.
"""
from __future__ import annotations

import torch

from rollart.engine.batch_scheduler import ScheduledBatch
from rollart.models import CausalLM
from rollart.models.paged import PagedBatch, VarlenLayout


def graph_buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 up to max_num_seqs (and max_num_seqs itself)."""
    small = {b for b in (1, 2, 4, 8) if b < max_num_seqs}
    return sorted(small | set(range(16, max_num_seqs, 16)) | {max_num_seqs})


class DecodeGraphs:
    def __init__(self, model: CausalLM, kv_cache: torch.Tensor, *, block_size: int, scratch_slot: int,
                 max_model_len: int, max_num_seqs: int, capture: bool = True):
        """``kv_cache`` (L, 2, blocks, block_size, Hkv, D) stays this one tensor for the graphs' life (they
        captured its address); ``scratch_slot`` is a cache slot no sequence owns, where padding rows write.
        ``capture=False`` (tests on the CPU) runs each bucket eagerly on the same static buffers."""
        self.model, self.kv_cache = model, kv_cache
        self.block_size, self.scratch_slot, self.max_model_len = block_size, scratch_slot, max_model_len
        self.capture = capture
        self.device = dev = kv_cache.device
        max_blocks_per_seq = -(-max_model_len // block_size)
        self.buckets = graph_buckets(max_num_seqs)
        B = self.buckets[-1]
        self.inputs = torch.zeros(4, B, dtype=torch.long, device=dev)      # ids, positions, slots, context_lens
        self.query_start = torch.arange(B + 1, dtype=torch.long, device=dev)
        self.block_tables = torch.zeros(B, max_blocks_per_seq, dtype=torch.long, device=dev)
        self.logits_index = torch.arange(B, dtype=torch.long, device=dev)
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.inputs[2].fill_(scratch_slot)
        for b in reversed(self.buckets if capture else []):
            self._capture(b)

    def _batch(self, b: int) -> PagedBatch:
        layout = VarlenLayout(self.query_start[:b + 1], self.inputs[3, :b], self.block_tables[:b], max_query_len=1)
        return PagedBatch(self.inputs[1, :b], self.inputs[2, :b], varlen=layout, num_positions=self.max_model_len)

    @torch.inference_mode()
    def _capture(self, b: int) -> None:
        model, kv = self.model, self.kv_cache
        model.forward_paged(self.inputs[0, :b], self._batch(b), kv, self.logits_index[:b])  # compiles the kernels
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = model.forward_paged(self.inputs[0, :b], self._batch(b), kv, self.logits_index[:b])  # (b, V)
        self.graphs[b], self.outputs[b] = graph, out

    def fits(self, batch: ScheduledBatch, rows: list[int]) -> bool:
        """A decode-only step (one new token per sequence, every one sampled) no larger than the largest bucket."""
        return (len(rows) == len(batch.seqs) <= self.buckets[-1]
                and all(n == 1 for n in batch.num_new_tokens))

    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        """Replay the smallest bucket that holds the batch -> logits (n, V) (a view into the graph's output)."""
        n, bs = len(batch.seqs), self.block_size
        b = next(x for x in self.buckets if x >= n)
        pad = b - n
        ids, pos, slots, ctx = [], [], [], []
        width = 1
        for seq in batch.seqs:
            p = seq.num_computed_tokens
            ids.append(seq.token_ids[p])
            pos.append(p)
            slots.append(seq.block_table[p // bs] * bs + p % bs)
            ctx.append(p + 1)
            width = max(width, len(seq.block_table))
        flat = ids + [0] * pad + pos + [0] * pad + slots + [self.scratch_slot] * pad + ctx + [0] * pad
        for seq in batch.seqs:
            flat.extend(seq.block_table)
            flat.extend([0] * (width - len(seq.block_table)))
        host = torch.tensor(flat, dtype=torch.long)
        self.inputs[:, :b].copy_(host[:4 * b].view(4, b), non_blocking=True)
        self.block_tables[:n, :width].copy_(host[4 * b:].view(n, width), non_blocking=True)
        if not self.capture:
            with torch.inference_mode():
                return self.model.forward_paged(self.inputs[0, :b], self._batch(b), self.kv_cache,
                                                self.logits_index[:b])[:n]
        self.graphs[b].replay()
        return self.outputs[b][:n]
