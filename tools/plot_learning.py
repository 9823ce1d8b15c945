"""Held-out accuracy against training step for runs of ``python -m recipes.grpo_math``, from their printed output.

    python tools/plot_learning.py lora_s0=run1.log full_s0=run2.log --out tools/bench/plots/grpo_math.png

Reads the lines ``step N: held-out accuracy X (task=..., ...)`` a run prints at each evaluation and draws one
curve per run (overall) and its per-task accuracies thin; prints ``LABEL initial=X final=X gain_points=X steps=N``
per run and, last, ``runs=N min_gain_points=X``.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

LINE = re.compile(r"^step (\d+): held-out accuracy ([\d.]+) \((.*)\)$")


def read(path: Path) -> list[tuple[int, float, dict[str, float]]]:
    points = []
    for line in path.read_text(errors="replace").splitlines():
        m = LINE.match(line.strip())
        if m:
            tasks = {k: float(v) for k, v in (item.split("=") for item in m[3].split())}
            points.append((int(m[1]), float(m[2]), tasks))
    if not points:
        raise SystemExit(f"error: {path} has no 'step N: held-out accuracy X' line; give a grpo_math run's output")
    return points


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", metavar="LABEL=LOG")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    a = p.parse_args()
    runs = {}
    for item in a.runs:
        label, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"error: {item!r}: give LABEL=LOGFILE")
        runs[label] = read(Path(path))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    gains = []
    for i, (label, points) in enumerate(runs.items()):
        color = f"C{i}"
        steps = [s for s, _, _ in points]
        ax.plot(steps, [acc for _, acc, _ in points], "o-", color=color, lw=2, label=f"{label} (all tasks)")
        for task in points[0][2]:
            ax.plot(steps, [t[task] for _, _, t in points], "-", color=color, lw=0.7, alpha=0.5)
            ax.annotate(task, (steps[-1], points[-1][2][task]), fontsize=6, color=color, alpha=0.7)
        first, last = points[0][1], points[-1][1]
        gains.append(100 * (last - first))
        print(f"{label} initial={first:.3f} final={last:.3f} gain_points={gains[-1]:.1f} steps={steps[-1]}")
    ax.axhline(runs[next(iter(runs))][0][1] + 0.15, ls="--", color="gray", lw=0.8, label="initial + 15 points")
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out accuracy (greedy)")
    ax.set_title("recipes.grpo_math on 2 CPU cores: held-out accuracy (per task thin)", fontsize=9)
    ax.legend(fontsize=7)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=100)
    print(f"runs={len(runs)} min_gain_points={min(gains):.1f}")


if __name__ == "__main__":
    main()
