"""ModelRunner: owns the model and the preallocated KV cache on the engine's device; turns a scheduled batch
into one forward and samples from it.

Three paths share the scheduler, the cache layout and the model code (``EngineConfig.kernels``):
* torch (the reference): attention per group of similar-length sequences, gathered keys and SDPA
  (``rollart.models.paged``); sampling per request with its own ``torch.Generator``.
* triton (the CUDA default): one paged-attention kernel over the packed tokens of every sequence, prefill
  and decode in the same launch (``rollart.models.paged_triton``); batched sampling on the device
  (``rollart.engine.device_sampler``); on CUDA, decode-only steps replay a graph (``rollart.engine.cuda_graphs``).
* cpu (the CPU default where it builds): rollart's C kernels over the same packed layout, prefill and decode in
  one call, and sampling in C from each request's own generator (``rollart.models.cpu_kernels``).
Per-step index tensors are built on the host and copied in one go; the only device-to-host copy of a step
is the (tokens, logprobs) pair the scheduler needs. A token's policy version needs no device state: a step
runs under one weight version, recorded by the engine as the tokens come back.
"""
from __future__ import annotations

import logging

import torch

from rollart.devices import Placement
from rollart.engine.config import EngineConfig
from rollart.engine.cuda_graphs import DecodeGraphs
from rollart.engine.batch_scheduler import ScheduledBatch
from rollart.engine.sequence import Sequence
from rollart import cpu_memory
from rollart.models import CausalLM, ModelConfig, cpu_kernels, cpu_linear
from rollart.models.paged import AttentionGroup, PagedBatch, VarlenLayout, build_group
from rollart.models.paged_ops import PagedOps

log = logging.getLogger(__name__)


def kv_bytes_per_block(mc: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    return mc.num_hidden_layers * 2 * block_size * mc.num_key_value_heads * mc.head_dim * dtype.itemsize


def graph_workspace_bytes(max_num_seqs: int, vocab: int, cuda_graphs: bool) -> int:
    """What CUDA-graph decode holds beside the KV cache: two float32 logits buffers of max_num_seqs rows and the
    graphs' workspaces (0 without graphs)."""
    return 2 * max_num_seqs * vocab * 4 + 256 * 2**20 if cuda_graphs else 0


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


def resolve_kernel(config: EngineConfig, placement: Placement) -> str:
    """The attention and sampling path ``EngineConfig.kernels`` names here: 'torch' | 'triton' | 'cpu'. An explicit
    'cpu' that cannot run raises (one line, why); 'auto' on the CPU falls back to 'torch' and logs why."""
    if config.kernels == "triton" or (config.kernels == "auto" and placement.is_cuda):
        return "triton"
    if config.kernels == "torch":
        return "torch"
    why = ("it runs on the CPU only" if placement.device.type != "cpu" else
           f"it serves {[str(d).removeprefix('torch.') for d in cpu_kernels.DTYPES]}, not {placement.dtype}"
           if placement.dtype not in cpu_kernels.DTYPES else cpu_kernels.unavailable())
    if not why:
        log.info("engine: %s", cpu_kernels.describe())
        return "cpu"
    if config.kernels == "cpu":
        raise ValueError(f"kernels='cpu' cannot run: {why}; set kernels=torch (or auto)")
    log.warning("engine: attention and sampling -> torch ops (kernels='cpu' cannot run: %s)", why)
    return "torch"


class ModelRunner:
    def __init__(self, model: CausalLM, config: EngineConfig, placement: Placement):
        if placement.is_cuda and placement.device.index is None:             # 'cuda' -> 'cuda:N': one key for
            placement = Placement(torch.device("cuda", torch.cuda.current_device()), placement.dtype)  # caches
        self.placement = placement
        self.device = placement.device
        self.model = model.to(device=placement.device, dtype=placement.dtype).fuse_projections()
        self.config = config
        self.block_size = config.block_size
        self.kernel = resolve_kernel(config, placement)
        """The attention and sampling path: 'torch' (reference) | 'triton' | 'cpu' (both kernels read the packed
        ``VarlenLayout``)."""
        self.kv_cache: torch.Tensor | None = None
        self.graphs: DecodeGraphs | None = None
        self.max_model_len = 0
        self.scratch_slot = 0
        self.packed = None
        if config.packed_linears and self.kernel == "cpu":
            log.info("engine: matmuls -> rollart C kernels, weights prepacked")
            self.packed = cpu_kernels.kernels().linears()
        elif config.packed_linears and placement.device.type == "cpu":
            why_not = cpu_linear.unavailable(placement.dtype)
            (log.warning if why_not else log.info)("engine: %s", cpu_linear.describe(placement.dtype))
            if not why_not:
                self.packed = cpu_linear.PackedLinears.onednn(batch_hint=config.max_num_seqs)
        if self.packed is not None:
            self.model.paged_ops = PagedOps(linear=self.packed)
            self.repack()
        if self.kernel == "cpu":
            kernels = cpu_kernels.kernels()
            self.model.paged_ops = kernels.paged_ops(linear=self.model.paged_ops.linear)
            if self.packed is not None:  # the C matmuls: every layer of a step in one call where the model fits
                layers = self.model.paged_ops.layers = kernels.decoder_layers(self.model, self.packed, placement.dtype)
                why = layers.unfit()
                log.info("engine: decoder layers -> %s", f"the model's layer loop ({why})" if why else
                         f"one C call a step (steps under {cpu_kernels.GEMM_ROWS} rows)")
        if placement.device.type == "cpu" and config.reuse_freed_memory:
            log.info("engine: %s", cpu_memory.reuse_freed_memory())
        self.forward_tokens = 0
        """Tokens that went through a forward (prefill chunks and decode tokens alike)."""

    def repack(self) -> None:
        """Refresh the prepacked CPU weights (after the weights changed in place)."""
        if self.packed is None:
            return
        m = self.model
        weights = [m.lm_head.weight]
        for layer in m.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            weights += [attn.o_proj.weight, mlp.down_proj.weight]
            weights += [w for w in (getattr(attn, "qkv_weight", None), getattr(mlp, "gate_up_weight", None)) if w is not None]
        self.packed.pack(weights)

    def allocate(self, num_blocks: int, max_model_len: int) -> None:
        """The KV cache (one block more than the scheduler's: padding rows of a CUDA graph write there) and,
        on CUDA, the decode graphs."""
        mc = self.model.config
        self.max_model_len = max_model_len
        self.scratch_slot = num_blocks * self.block_size
        self.kv_cache = torch.zeros(mc.num_hidden_layers, 2, num_blocks + 1, self.block_size, mc.num_key_value_heads,
                                    mc.head_dim, dtype=self.placement.dtype, device=self.device)  # (L, 2, blocks, bs, Hkv, D)
        self.model.rotary.tables(max_model_len, self.device, self.placement.dtype)  # built once, outside graphs
        if self.kernel == "triton" and self.placement.is_cuda and self.config.cuda_graphs:
            self.graphs = self.decode_graphs()

    def release(self) -> int:
        """Free the KV cache and the decode graphs captured over it (``allocate`` makes both again); bytes freed."""
        freed = self.kv_cache.numel() * self.kv_cache.element_size() if self.kv_cache is not None else 0
        self.graphs = None
        self.kv_cache = None
        if self.placement.is_cuda:
            torch.cuda.empty_cache()  # back to the device, where the trainer can take it
        return freed

    def decode_graphs(self, capture: bool = True) -> DecodeGraphs:
        """Decode graphs over this runner's model and allocated KV cache (``capture=False``: run eagerly)."""
        return DecodeGraphs(self.model, self.kv_cache, block_size=self.block_size, scratch_slot=self.scratch_slot,
                            max_model_len=self.max_model_len, max_num_seqs=self.config.max_num_seqs, capture=capture)

    # ---- inputs ----------------------------------------------------------------------------------
    def _group(self, rows: list[int], offsets: list[int], q_lens: list[int], ctx: list[int],
               tables: list[list[int]]) -> AttentionGroup:
        width = max(len(tables[r]) for r in rows)
        bt = torch.tensor([tables[r] + [0] * (width - len(tables[r])) for r in rows])  # (S, B)
        return build_group(torch.tensor([offsets[r] for r in rows]), torch.tensor([q_lens[r] for r in rows]),
                           torch.tensor([ctx[r] for r in rows]), bt, self.block_size)

    @staticmethod
    def flatten(batch: ScheduledBatch, block_size: int):
        """Host lists of one step: packed ids, positions, cache slots; per sequence offset, query length,
        context length and block table."""
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
            slots.extend(table[p // block_size] * block_size + p % block_size for p in pos)
            q_lens.append(n)
            ctx.append(start + n)
            tables.append(table)
        return ids, positions, slots, offsets, q_lens, ctx, tables

    def prepare(self, batch: ScheduledBatch) -> tuple[torch.Tensor, PagedBatch, list[int]]:
        """Reference path: packed input ids (N,), the paged layout (groups), the packed index of each
        sequence's last new token."""
        ids, positions, slots, offsets, q_lens, ctx, tables = self.flatten(batch, self.block_size)
        decode = [r for r, q in enumerate(q_lens) if q == 1]
        prefill = [r for r, q in enumerate(q_lens) if q > 1]
        groups = [self._group(rows, offsets, q_lens, ctx, tables)
                  for kind in (decode, prefill) for rows in bucket_by_length(kind, ctx)]
        last = [o + q - 1 for o, q in zip(offsets, q_lens)]
        paged = PagedBatch(torch.tensor(positions), torch.tensor(slots), groups=groups, num_positions=max(positions) + 1)
        if self.device.type != "cpu":
            paged = _paged_to(paged, self.device)
        return torch.tensor(ids, device=self.device), paged, last

    def prepare_varlen(self, batch: ScheduledBatch, rows: list[int]) -> tuple[torch.Tensor, PagedBatch, torch.Tensor]:
        """Kernel path: packed ids (N,), the varlen layout, logits rows (len(rows),); one host-to-device copy."""
        ids, positions, slots, offsets, q_lens, ctx, tables = self.flatten(batch, self.block_size)
        N, S = len(ids), len(q_lens)
        width = max(len(t) for t in tables)
        last = [offsets[r] + q_lens[r] - 1 for r in rows]
        flat = ids + positions + slots + offsets + [N] + ctx + last
        for t in tables:
            flat.extend(t)
            flat.extend([0] * (width - len(t)))
        dev = torch.tensor(flat, dtype=torch.long).to(self.device, non_blocking=True)
        parts = dev[:3 * N].view(3, N)
        o = 3 * N
        query_start, context_lens = dev[o:o + S + 1], dev[o + S + 1:o + 2 * S + 1]
        o += 2 * S + 1
        logits_index, block_tables = dev[o:o + len(rows)], dev[o + len(rows):].view(S, width)
        layout = VarlenLayout(query_start, context_lens, block_tables, max(q_lens),
                              kernel=self.kernel)
        return parts[0], PagedBatch(parts[1], parts[2], varlen=layout, num_positions=max(positions) + 1), logits_index

    # ---- K/V hand-over (PD disaggregation) ------------------------------------------------------------
    @torch.inference_mode()
    def export_kv(self, block_table: list[int], num_tokens: int) -> torch.Tensor:
        """The blocks holding a sequence's first num_tokens tokens, gathered contiguous: (L, 2, nb, bs, Hkv, D)
        (slots past num_tokens in the last block are whatever the cache held)."""
        nb = -(-num_tokens // self.block_size)
        runs = _runs(block_table[:nb])
        if len(runs) == 1:
            return self.kv_cache[:, :, runs[0][0]:runs[0][0] + nb].clone()
        return torch.cat([self.kv_cache[:, :, first:first + n] for first, _, n in runs], dim=2)

    @torch.inference_mode()
    def install_kv(self, block_table: list[int], kv: torch.Tensor, num_tokens: int) -> None:
        """Write exported blocks (L, 2, nb, bs', Hkv, D) into a sequence's blocks: whole blocks when both caches
        page alike, else token by token for its first num_tokens tokens."""
        kv = kv.to(device=self.device, dtype=self.kv_cache.dtype, non_blocking=True)
        L, _, nb, bs, hkv, d = kv.shape
        if bs == self.block_size:
            for first, at, n in _runs(block_table[:nb]):                    # consecutive blocks: one slice copy
                self.kv_cache[:, :, first:first + n].copy_(kv[:, :, at:at + n])
            return
        mine = self.block_size
        slots = torch.tensor([block_table[p // mine] * mine + p % mine for p in range(num_tokens)], device=self.device)
        flat = self.kv_cache.view(L, 2, -1, hkv, d)                          # (L, 2, slots, Hkv, D)
        flat.index_copy_(2, slots, kv.reshape(L, 2, nb * bs, hkv, d)[:, :, :num_tokens])

    # ---- forward and sampling ----------------------------------------------------------------------
    @torch.inference_mode()
    def run(self, batch: ScheduledBatch, rows: list[int]) -> torch.Tensor:
        """Forward the batch (K/V written to the cache); logits (len(rows), V) at the last token of each row."""
        if self.kernel == "torch":
            ids, paged, last = self.prepare(batch)
            self.forward_tokens += ids.numel()
            index = torch.tensor([last[r] for r in rows], dtype=torch.long, device=self.device)
            return self.model.forward_paged(ids, paged, self.kv_cache, index)
        if self.graphs is not None and self.graphs.fits(batch, rows):
            self.forward_tokens += sum(batch.num_new_tokens)
            return self.graphs.run(batch)
        ids, paged, index = self.prepare_varlen(batch, rows)
        self.forward_tokens += ids.numel()
        return self.model.forward_paged(ids, paged, self.kv_cache, index)

    @torch.inference_mode()
    def sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> tuple[list[int], list[float]]:
        """One token and its logprob per row (log_softmax of the raw logits; see ``rollart.engine.sampler``)."""
        if self.kernel != "triton":
            from rollart.engine.sampler import sample                      # per-request CPU generators
            return sample(logits.cpu(), [s.sampling for s in seqs], [s.generator for s in seqs],
                          cpu_kernels.kernels() if self.kernel == "cpu" else None)
        from rollart.engine.device_sampler import SamplingTensors, sample_on_device, step_seed
        st = SamplingTensors.build([s.sampling for s in seqs], [step_seed(s.seed, s.num_output_tokens) for s in seqs],
                                   logits.shape[-1], self.device)
        pairs = sample_on_device(logits, st).tolist()                      # the step's one device-to-host copy
        return [int(t) for t, _ in pairs], [lp for _, lp in pairs]


def _runs(blocks: list[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of consecutive block ids: (first block, index in ``blocks``, length). Fresh blocks mostly
    come off the free list in order, so a prompt's blocks are usually one or a few runs: slice copies, which
    run at memcpy speed, where a gather by index does not."""
    runs: list[tuple[int, int, int]] = []
    for i, b in enumerate(blocks):
        if runs and runs[-1][0] + runs[-1][2] == b:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((b, i, 1))
    return runs


def _paged_to(paged: PagedBatch, device: torch.device) -> PagedBatch:
    """The reference path's layout moved to a GPU (kernels='torch' on CUDA: correct, not fast)."""
    groups = [AttentionGroup(g.q_index.to(device), None if g.q_valid is None else g.q_valid.to(device),
                             g.block_tables.to(device), g.mask.to(device)) for g in paged.groups]
    return PagedBatch(paged.positions.to(device), paged.slot_mapping.to(device), groups=groups,
                      num_positions=paged.num_positions)


@torch.inference_mode()
def kv_blocks_from_gpu_memory(runner: ModelRunner, bytes_per_block: int) -> int:
    """KV cache blocks that fit in ``gpu_memory_utilization`` of the GPU once the weights are loaded and a
    profiling step (a full ``max_num_batched_tokens`` prefill, then sampling ``max_num_seqs`` rows with
    top-k/top-p) has shown the activations' peak. Memory other processes hold on the GPU counts as used."""
    cfg, mc, dev = runner.config, runner.model.config, runner.device
    n, bs = cfg.max_num_batched_tokens, cfg.block_size
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.memory_allocated(dev)
    blocks = -(-n // bs)
    runner.kv_cache = torch.zeros(mc.num_hidden_layers, 2, blocks, bs, mc.num_key_value_heads, mc.head_dim,
                                  dtype=runner.placement.dtype, device=dev)
    seq = Sequence("profile", [0] * n, _profile_params(), torch.Generator())
    seq.block_table = list(range(blocks))
    logits = runner.run(ScheduledBatch([seq], [n]), [0])
    rows = min(cfg.max_num_seqs, n)
    if runner.kernel == "triton":
        runner.sample(logits.expand(rows, -1).contiguous(), [seq] * rows)
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev) - before - runner.kv_cache.numel() * runner.kv_cache.element_size()
    runner.kv_cache = None
    del logits
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(dev)
    graphs = graph_workspace_bytes(cfg.max_num_seqs, mc.vocab_size, cfg.cuda_graphs)
    budget = total * cfg.gpu_memory_utilization - (total - free) - peak - graphs
    num = int(budget // bytes_per_block)
    if num < 1:
        raise ValueError(f"no GPU memory left for the KV cache: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free, "
                         f"activations peak at {peak / 2**30:.2f} GiB; raise gpu_memory_utilization "
                         f"(now {cfg.gpu_memory_utilization}) or lower max_num_batched_tokens / max_num_seqs")
    return num


def _profile_params():
    from rollart.types import SamplingParams
    return SamplingParams(temperature=1.0, top_k=50, top_p=0.9, max_tokens=1)
