"""GPU benchmark: engine, trainer and weight sync on a Qwen3-0.6B-shaped model, side by side in one run.

    python tools/bench/gpu.py --quick                  # on a CUDA GPU (tools/gpu/check.sh runs it)
    python tools/bench/gpu.py --device cpu --tiny      # exercises the trainer part and the plot on a CPU

Parts (each its own file, each a function returning a dict; a part whose file is absent reports n/a):
  tools/bench/gpu_engine.py   measure_engine()       engine_vs_hf_b64, engine_vs_plain_b64, decode_roofline_frac
  tools/bench/gpu_trainer.py  measure_trainer()      trainer_vs_plain_torch (and MFU)
  tools/bench/gpu_weights.py  measure_weight_sync()  weight_sync_s

Targets: engine_vs_hf_b64 >= 30, engine_vs_plain_b64 >= 0.8, trainer_vs_plain_torch >= 0.9, weight_sync_s <= 1.0.
The last line holds the five figures (n/a where not measured); without a GPU it is ``skipped=no_cuda``. The
plot goes to tools/bench/plots/gpu.png (--plot PATH) when matplotlib is installed.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

PARTS = (("gpu_engine", "measure_engine"), ("gpu_trainer", "measure_trainer"), ("gpu_weights", "measure_weight_sync"))
KEYS = ("engine_vs_hf_b64", "engine_vs_plain_b64", "trainer_vs_plain_torch", "weight_sync_s", "decode_roofline_frac")
TARGETS = {"engine_vs_hf_b64": (">=", 30.0), "engine_vs_plain_b64": (">=", 0.8),
           "trainer_vs_plain_torch": (">=", 0.9), "weight_sync_s": ("<=", 1.0)}


def run_part(module: str, function: str, **options) -> dict:
    """The part's dict, or ``{"missing": ...}`` when its file is not there (an error inside it propagates)."""
    if importlib.util.find_spec(module) is None:
        return {"missing": f"tools/bench/{module}.py"}
    fn = getattr(importlib.import_module(module), function)
    accepted = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in options.items() if k in accepted})


def last_line(figures: dict) -> str:
    return " ".join(f"{k}={figures[k]:.2f}" if isinstance(figures.get(k), (int, float)) else f"{k}=n/a"
                    for k in KEYS)


def plot(figures: dict, device: str, out: Path) -> str:
    try:
        import matplotlib
    except ImportError:
        return "plot skipped: matplotlib is not installed"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(TARGETS), figsize=(3.2 * len(TARGETS), 3.4), layout="constrained")
    for ax, (key, (sense, goal)) in zip(axes, TARGETS.items()):
        value = figures.get(key)
        if isinstance(value, (int, float)):
            met = value >= goal if sense == ">=" else value <= goal
            ax.bar([0], [value], color="tab:green" if met else "tab:red")
            ax.text(0, value, f"{value:.2f}", ha="center", va="bottom")
        else:
            ax.text(0, goal / 2, "n/a", ha="center")
        ax.axhline(goal, ls="--", color="gray", label=f"target {sense} {goal:g}")
        ax.set_xlim(-0.6, 0.6)
        ax.set_ylim(0, 1.3 * max(goal, value if isinstance(value, (int, float)) else 0))
        ax.set_xticks([])
        ax.set_title(key, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"rollart on {device} (measured)", fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return f"plot: {out}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer timed steps in every part")
    ap.add_argument("--device", default="cuda", help="cuda (default) | cuda:N | cpu (with --tiny: a code check)")
    ap.add_argument("--tiny", action="store_true", help="tiny models (parts that support it)")
    ap.add_argument("--plot", type=Path, default=HERE / "plots" / "gpu.png", help="where the PNG goes")
    args = ap.parse_args()
    import torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device visible: nothing measured")
        print("skipped=no_cuda")
        return
    figures: dict = {}
    device_name = args.device
    for module, function in PARTS:
        got = run_part(module, function, device=args.device, quick=args.quick, tiny=args.tiny)
        if "missing" in got:
            print(f"{module}: n/a ({got['missing']} is not there)", flush=True)
            continue
        if "skipped" in got:
            print(f"{module}: skipped={got['skipped']}", flush=True)
            continue
        print(f"{module}: " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in got.items()), flush=True)
        device_name = got.get("device", device_name)
        figures.update(got)
    print(plot(figures, device_name, args.plot), flush=True)
    print(last_line(figures))


if __name__ == "__main__":
    main()
