"""CPU linear paths: F.linear, oneDNN's prepacked linear and rollart's C kernels' matmul, fp32 and bf16, on
SmolLM2-135M's engine shapes.

    python tools/bench/cpu_linear.py --quick     # < 60 s on 2 cores
    python tools/bench/cpu_linear.py             # more repetitions, batch 1 / 16 / 64

Workload: the five matrices a decode step of SmolLM2-135M multiplies by (fused qkv 576->960, o 576->576, fused
gate/up 576->3072, down 1536->576, lm_head 576->49152), at 16 rows (and 1 and 64 without --quick), one thread,
the median of several calls with the weights out of the inner caches between shapes. Both paths run in one
process side by side; a child process repeats the measurement with torch and oneDNN capped to AVX2
(``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``), which approximates a CPU without AVX-512 on this one: there
torch refuses oneDNN's bf16 path (the packed bf16 column is absent) as it does on such a CPU. The capped figures
are EMULATED (same silicon, fewer instructions allowed), named so on the output.

Besides each shape alone (its weight soon in the caches), ``step``: every matmul of a decode step, 30 layers of
distinct weights and the LM head (0.54 GB in fp32), so that they stream from memory as in the engine. The child
times the C kernels' AVX2 build (x86-64-v3).

Keys (speed-ups are time ratios, > 1 is faster; geometric means over the shapes at 16 rows, ``step_*`` the whole
step's matmuls): `packed_vs_flinear_*` (oneDNN's packed path over F.linear), `c_vs_packed_*` (the C kernels'
matmul, which the engine runs with ``kernels=cpu``, over oneDNN's), `c_vs_flinear_*`, `bf16_vs_fp32` (the best
bf16 path over the best fp32 path: does bf16 pay on this CPU), and `capped_*` the same in the child.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}
CAP = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def timed(fn, reps: int) -> float:
    fn()
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def paths(dtype: torch.dtype, arch: str) -> dict:
    """The matmul paths that can serve ``dtype`` here: F.linear, oneDNN's prepacked one, rollart's C kernels' (built
    for ``arch``)."""
    from rollart.models import cpu_kernels, cpu_linear
    out = {"flinear": None}
    if not cpu_linear.unavailable(dtype):
        out["packed"] = lambda: cpu_linear.PackedLinears.onednn(batch_hint=16)
    kernels = cpu_kernels.load(arch)
    if kernels is not None:
        out["c"] = kernels.linears
    return out


def measure(rows_list: list[int], reps: int, arch: str) -> dict:
    from rollart.cpu_features import cpu_features

    torch.set_num_threads(1)
    out = {"cpu": cpu_features().describe(), "times": {}}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        made = paths(dtype, arch)
        for shape, (n, k) in SHAPES.items():
            w = torch.randn(n, k).to(dtype)
            lins = {"flinear": F.linear}
            for path, make in made.items():
                if make is not None:
                    lins[path] = make()
                    lins[path].pack([w])
            for rows in rows_list:
                x = torch.randn(rows, k).to(dtype)
                for path, lin in lins.items():
                    out["times"][f"{name}/{path}/{shape}/{rows}"] = timed(lambda: lin(x, w), reps)
        out["times"] |= step_times(dtype, made, reps)
    return out


def step_times(dtype: torch.dtype, made: dict, reps: int, layers: int = 30, rows: int = 16) -> dict:
    """Every matmul of one decode step of SmolLM2-135M — ``layers`` layers of distinct weights and the LM head, so
    they come from memory as in the engine — per path, at ``rows`` rows."""
    name = str(dtype).removeprefix("torch.")
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(*SHAPES[s], generator=g).to(dtype) for _ in range(layers) for s in SHAPES if s != "lm_head"]
    weights.append(torch.randn(*SHAPES["lm_head"], generator=g).to(dtype))
    xs = {k: torch.randn(rows, k, generator=g).to(dtype) for k in {w.shape[1] for w in weights}}
    out = {}
    for path, make in made.items():
        lin = F.linear if make is None else make()
        if make is not None:
            lin.pack(weights)
        out[f"{name}/{path}/step/{rows}"] = timed(lambda: [lin(xs[w.shape[1]], w) for w in weights], max(3, reps // 2))
        del lin
    return out


def geo(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def keys(times: dict, rows: int = 16, prefix: str = "") -> dict:
    def t(dtype, path, shape):
        return times.get(f"{dtype}/{path}/{shape}/{rows}")

    res = {}
    for dtype in ("float32", "bfloat16"):
        short = "fp32" if dtype == "float32" else "bf16"
        for fast, slow in (("packed", "flinear"), ("c", "packed"), ("c", "flinear")):
            pairs = [(t(dtype, slow, s), t(dtype, fast, s)) for s in SHAPES]
            res[f"{prefix}{fast}_vs_{slow}_{short}"] = (geo([a / b for a, b in pairs]) if all(a and b for a, b in pairs)
                                                        else float("nan"))
            a, b = t(dtype, slow, "step"), t(dtype, fast, "step")
            res[f"{prefix}step_{fast}_vs_{slow}_{short}"] = a / b if a and b else float("nan")

    def best(dtype, s):
        return min(x for x in (t(dtype, p, s) for p in ("flinear", "packed", "c")) if x)
    res[f"{prefix}bf16_vs_fp32"] = geo([best("float32", s) / best("bfloat16", s) for s in SHAPES])
    return res


def plot(native: dict, capped: dict | None, rows: int, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sets = [("this CPU", native)] + ([("AVX2-capped (EMULATED)", capped)] if capped else [])
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4), squeeze=False)
    combos = [(d, p) for d in ("float32", "bfloat16") for p in ("flinear", "packed", "c")]
    columns = list(SHAPES) + ["step"]
    for ax, (title, res) in zip(axes[0], sets):
        width = 0.13
        for j, (dtype, p) in enumerate(combos):
            ys = [res["times"].get(f"{dtype}/{p}/{s}/{rows}", 0) * 1e3 for s in columns]
            ax.bar([i + (j - 2.5) * width for i in range(len(columns))], ys, width, label=f"{dtype} {p}")
        ax.set_xticks(range(len(columns)), columns)
        ax.set_yscale("log")
        ax.set_ylabel(f"ms per call ({rows} rows, 1 thread)")
        ax.set_title(f"{title}\n{res['cpu']}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="16 rows only, fewer repetitions (< 60 s)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-capped", action="store_true", help="skip the AVX2-capped child measurement")
    a = p.parse_args()
    rows_list = [16] if a.quick else [1, 16, 64]
    reps = 7 if a.quick else 25
    if a.child:  # the C kernels' AVX2 build, as on a CPU without AVX-512
        print(json.dumps(measure(rows_list, reps, "x86-64-v3")))
        return
    native = measure(rows_list, reps, "native")
    capped = None
    if not a.no_capped:
        argv = [sys.executable, __file__, "--child"] + (["--quick"] if a.quick else [])
        proc = subprocess.run(argv, env={**os.environ, **CAP}, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            sys.exit(f"the AVX2-capped child failed: {proc.stderr.strip().splitlines()[-1:]}")
        capped = json.loads(proc.stdout.strip().splitlines()[-1])
    plot(native, capped, 16, Path(__file__).parent / "plots" / "cpu_linear.png")
    for rows in rows_list:
        for k, v in sorted(native["times"].items()):
            if k.endswith(f"/{rows}"):
                print(f"{native['cpu']}  {k}: {v * 1e3:.3f} ms")
        if capped:
            for k, v in sorted(capped["times"].items()):
                if k.endswith(f"/{rows}"):
                    print(f"EMULATED {capped['cpu']} capped to AVX2  {k}: {v * 1e3:.3f} ms")
    res = keys(native["times"]) | (keys(capped["times"], prefix="capped_") if capped else {})
    print(f"cpu={native['cpu'].split(' (')[0].replace(' ', '_')} " + " ".join(f"{k}={v:.2f}" for k, v in res.items()))


if __name__ == "__main__":
    main()
