"""Trainer benchmark on a GPU: rollart's torch trainer against a plain hand-written bf16 torch training loop.

    python tools/bench/gpu_trainer.py --quick              # on a CUDA GPU; prints skipped=no_cuda without one
    python tools/bench/gpu_trainer.py --device cpu --tiny  # the same code on a tiny model on the CPU (a check
                                                           # that it runs; its figures say nothing about GPUs)

Model: the Qwen3-0.6B shape (hidden 1024, 28 layers, 16 query / 8 KV heads, head_dim 128, SwiGLU 3072, vocab
151936, tied embeddings), random init. Batch: 8 sequences x 1024 tokens (a 128-token prompt, 896 trained
tokens each). Both sides do forward, backward and one AdamW step per iteration, one after the other in this
process, each timed after warm-up steps with the GPU synchronised:

* trainer: ``TorchTrainer.train_step`` on the batch as the run hands it over (a CPU batch moved to the GPU),
  ``trainer.dtype=bfloat16`` (fp32 master weights, autocast), fused AdamW, GRPO loss, grad clip 1.0;
* plain: a ~50-line model written here (bf16 parameters, SDPA attention, ``F.rms_norm``), cross-entropy on
  the trained tokens, fused AdamW on the bf16 parameters: what a hand-written loop gives.

``trainer_vs_plain_torch`` = trainer tokens/s / plain tokens/s (target >= 0.9 on the GPU). MFU = model FLOPs
(6 x matmul parameters + causal attention, per token) x tokens/s / the GPU's dense bf16 peak (known GPUs only).
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from rollart.models import CausalLM, ModelConfig
from rollart.types import Trajectory

QWEN3_0_6B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
                  tie_word_embeddings=True, rope_theta=1e6)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True)
PEAK_BF16_TFLOPS = {"H100": 989.5, "H800": 989.5, "H200": 989.5, "H20": 148.0, "A100": 312.0, "L40S": 366.0,
                    "L4": 121.0}
"""Dense bf16 tensor-core peak by GPU name (the first name found in torch.cuda.get_device_name())."""


def train_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Forward + backward FLOPs per token: 6 x matmul parameters (lm_head included) + causal attention."""
    h, i, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    matmul_params = L * (h * q + 2 * h * kv + q * h + 3 * h * i) + h * cfg.vocab_size
    attention = L * 2 * seq_len * q  # QK^T and AV, 2 FLOPs per MAC, halved by the causal mask (forward)
    return 6 * matmul_params + 3 * attention


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


# ---------------------------------------------------------------------------------------------- plain loop
class PlainBlock(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        h, q, kv = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        self.c = c
        self.qkv = nn.Linear(h, q + 2 * kv, bias=False)
        self.o = nn.Linear(q, h, bias=False)
        self.gate_up = nn.Linear(h, 2 * c.intermediate_size, bias=False)
        self.down = nn.Linear(c.intermediate_size, h, bias=False)
        self.norms = nn.ParameterList([nn.Parameter(torch.ones(n)) for n in (h, h, c.head_dim, c.head_dim)])

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        c, (B, T, _) = self.c, x.shape
        H, Hkv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        qkv = self.qkv(F.rms_norm(x, (x.shape[-1],), self.norms[0], c.rms_norm_eps)).view(B, T, H + 2 * Hkv, D)
        q = F.rms_norm(qkv[:, :, :H], (D,), self.norms[2], c.rms_norm_eps)
        k = F.rms_norm(qkv[:, :, H:H + Hkv], (D,), self.norms[3], c.rms_norm_eps)
        v = qkv[:, :, H + Hkv:]
        q, k = (torch.cat((-t[..., D // 2:], t[..., :D // 2]), -1) * sin + t * cos for t in (q, k))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=True)  # (B, H, T, D)
        x = x + self.o(o.transpose(1, 2).reshape(B, T, H * D))
        g, u = self.gate_up(F.rms_norm(x, (x.shape[-1],), self.norms[1], c.rms_norm_eps)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class PlainLM(nn.Module):
    """The same shape written plainly: fused qkv and gate/up matrices, tied embedding, no options."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.blocks = nn.ModuleList(PlainBlock(c) for _ in range(c.num_hidden_layers))
        self.norm = nn.Parameter(torch.ones(c.hidden_size))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        T, D = ids.shape[1], self.c.head_dim
        inv = 1.0 / self.c.rope_theta ** (torch.arange(0, D, 2, device=ids.device).float() / D)
        ang = torch.outer(torch.arange(T, device=ids.device).float(), inv).repeat(1, 2)  # (T, D)
        cos, sin = (f(ang)[None, :, None].to(self.embed.weight.dtype) for f in (torch.cos, torch.sin))
        x = self.embed(ids)  # (B, T, h)
        for block in self.blocks:
            x = block(x, cos, sin)
        return F.linear(F.rms_norm(x, (x.shape[-1],), self.norm, self.c.rms_norm_eps), self.embed.weight)


def plain_step(model: nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor, mask: torch.Tensor) -> float:
    logits = model(ids)[:, :-1]  # (B, T-1, V)
    nll = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
    loss = (nll * mask[:, 1:].flatten()).sum() / mask[:, 1:].sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


# ---------------------------------------------------------------------------------------------- measuring
def make_trajectories(cfg: ModelConfig, rows: int, seq_len: int, prompt: int, seed: int = 0) -> list[Trajectory]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for r in range(rows):
        ids = torch.randint(0, cfg.vocab_size, (seq_len,), generator=g).tolist()
        mask = [0] * prompt + [1] * (seq_len - prompt)
        lps = [-float(torch.rand((), generator=g)) - 1.0 if m else 0.0 for m in mask]
        out.append(Trajectory(trajectory_id=f"b{r}", group_id=f"g{r // 4}", task="bench", token_ids=ids,
                              loss_mask=mask, logprobs=lps, versions=[0 if m else -1 for m in mask],
                              reward=float(r % 2)))
    return out


def _timed(step, device: torch.device, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / iters


def _reset_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def measure_trainer(device: str = "cuda", tiny: bool = False, quick: bool = True, rows: int = 8,
                    seq_len: int = 1024) -> dict:
    """Trainer vs plain-loop tokens/s (and MFU) on ``device``; ``{"skipped": "no_cuda"}`` when CUDA is asked for
    and none is visible. ``tiny`` uses a tiny model and 4 x 64 tokens (to exercise the code on a CPU)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        return {"skipped": "no_cuda"}
    from rollart.trainer import TrainerConfig
    from rollart.trainer.torch_trainer import TorchTrainer

    dev = torch.device(device)
    if tiny:
        rows, seq_len = 4, 64
    mcfg = ModelConfig(**(TINY if tiny else QWEN3_0_6B))
    warmup, iters = (1, 2) if tiny else ((2, 5) if quick else (3, 15))
    prompt = seq_len // 8
    tokens = rows * seq_len
    trajs = make_trajectories(mcfg, rows, seq_len, prompt)
    torch.manual_seed(0)
    result: dict = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                    "model": "tiny" if tiny else "Qwen3-0.6B shape", "tokens_per_step": tokens}

    # 1) the plain loop: bf16 parameters, fused AdamW
    _reset_memory(dev)
    plain = PlainLM(mcfg).to(device=dev, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-5, fused=dev.type == "cuda")
    ids = torch.tensor([t.token_ids for t in trajs], device=dev)  # (B, T)
    mask = torch.tensor([t.loss_mask for t in trajs], device=dev, dtype=torch.float32)  # (B, T)
    plain_s = _timed(lambda: plain_step(plain, opt, ids, mask), dev, warmup, iters)
    result["plain_peak_gb"] = _peak_gb(dev)
    del plain, opt, ids, mask

    # 2) rollart's trainer on the same shape (its own model class), the batch built once on the CPU
    _reset_memory(dev)
    model = CausalLM(mcfg)
    model.init_weights(torch.Generator().manual_seed(0))
    cfg = TrainerConfig(device=device, dtype="bfloat16", lr=1e-5, grad_clip=1.0, micro_batch_tokens=tokens,
                        num_threads=torch.get_num_threads())
    trainer = TorchTrainer(cfg, model=model)
    from rollart.trainer import build_batch
    batch = build_batch(trajs)
    trainer_s = _timed(lambda: trainer.train_step(batch), dev, warmup, iters)
    result["trainer_peak_gb"] = _peak_gb(dev)
    del trainer, model

    flops = train_flops_per_token(mcfg, seq_len)
    peak = peak_flops(dev)
    result.update(trainer_tok_s=tokens / trainer_s, plain_tok_s=tokens / plain_s, trainer_step_s=trainer_s,
                  plain_step_s=plain_s, trainer_vs_plain_torch=plain_s / trainer_s,
                  mfu=flops * tokens / trainer_s / peak if peak else None,
                  plain_mfu=flops * tokens / plain_s / peak if peak else None)
    return result


def summary_line(r: dict) -> str:
    if "skipped" in r:
        return f"skipped={r['skipped']}"
    mfu = f"{r['mfu']:.3f}" if r["mfu"] is not None else "n/a"
    return f"trainer_vs_plain_torch={r['trainer_vs_plain_torch']:.2f} mfu={mfu}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer timed steps")
    ap.add_argument("--device", default="cuda", help="cuda (default) | cuda:N | cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny model, 4 x 64 tokens (a CPU check of the code)")
    args = ap.parse_args()
    r = measure_trainer(args.device, tiny=args.tiny, quick=args.quick)
    if "skipped" not in r:
        gb = lambda v: "n/a" if v is None else f"{v:.1f} GiB"  # noqa: E731
        print(f"{r['model']} on {r['device']}, {r['tokens_per_step']} tokens a step\n"
              f"  trainer {r['trainer_tok_s']:,.0f} tok/s ({r['trainer_step_s'] * 1e3:.1f} ms a step, peak "
              f"{gb(r['trainer_peak_gb'])})\n"
              f"  plain   {r['plain_tok_s']:,.0f} tok/s ({r['plain_step_s'] * 1e3:.1f} ms a step, peak "
              f"{gb(r['plain_peak_gb'])})", flush=True)
        if not math.isfinite(r["trainer_vs_plain_torch"]):
            raise SystemExit("error: a step took no measurable time")
    print(summary_line(r))


if __name__ == "__main__":
    main()
