"""ModelRunner: owns the model and the preallocated KV cache; turns a scheduled batch into one forward."""
from __future__ import annotations

import torch

from rollart.engine.config import EngineConfig
from rollart.engine.scheduler import ScheduledBatch
from rollart.models import CausalLM, ModelConfig
from rollart.models.paged import AttentionGroup, PagedBatch, build_group


def kv_bytes_per_block(mc: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    return mc.num_hidden_layers * 2 * block_size * mc.num_key_value_heads * mc.head_dim * dtype.itemsize


def bucket_by_length(rows: list[int], lengths: list[int], ratio: float = 1.5) -> list[list[int]]:
    """Split rows into groups of similar length so padding to the group's longest wastes little:
    sorted by length, a new group starts when a row is more than ``ratio`` x the group's shortest."""
    groups: list[list[int]] = []
    for r in sorted(rows, key=lambda r: lengths[r]):
        if groups and lengths[r] <= ratio * lengths[groups[-1][0]]:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


class ModelRunner:
    def __init__(self, model: CausalLM, config: EngineConfig, num_blocks: int):
        self.model = model.fuse_projections()
        self.block_size = config.block_size
        mc = model.config
        self.kv_cache = torch.zeros(mc.num_hidden_layers, 2, num_blocks, config.block_size,
                                    mc.num_key_value_heads, mc.head_dim, dtype=config.torch_dtype)  # (L, 2, blocks, bs, Hkv, D)

    def _group(self, rows: list[int], offsets: list[int], q_lens: list[int], ctx: list[int],
               tables: list[list[int]]) -> AttentionGroup:
        width = max(len(tables[r]) for r in rows)
        bt = torch.tensor([tables[r] + [0] * (width - len(tables[r])) for r in rows])  # (S, B)
        return build_group(torch.tensor([offsets[r] for r in rows]), torch.tensor([q_lens[r] for r in rows]),
                           torch.tensor([ctx[r] for r in rows]), bt, self.block_size)

    def prepare(self, batch: ScheduledBatch) -> tuple[torch.Tensor, PagedBatch, list[int]]:
        """Packed input ids (N,), the paged layout, and the packed index of each sequence's last new token."""
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        offsets, q_lens, ctx, tables = [], [], [], []
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            start = seq.num_computed_tokens
            offsets.append(len(ids))
            ids.extend(seq.token_ids[start:start + n])
            pos = range(start, start + n)
            positions.extend(pos)
            table = seq.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in pos)
            q_lens.append(n)
            ctx.append(start + n)
            tables.append(table)
        decode = [r for r, q in enumerate(q_lens) if q == 1]
        prefill = [r for r, q in enumerate(q_lens) if q > 1]
        groups = [self._group(rows, offsets, q_lens, ctx, tables)
                  for kind in (decode, prefill) for rows in bucket_by_length(kind, ctx)]
        last = [o + q - 1 for o, q in zip(offsets, q_lens)]
        return torch.tensor(ids), PagedBatch(torch.tensor(positions), torch.tensor(slots), groups), last

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch, rows: list[int]) -> torch.Tensor:
        """Forward the batch (K/V written to the cache); logits (len(rows), V) at the last token of each row."""
        ids, paged, last = self.prepare(batch)
        return self.model.forward_paged(ids, paged, self.kv_cache, torch.tensor([last[r] for r in rows], dtype=torch.long))
