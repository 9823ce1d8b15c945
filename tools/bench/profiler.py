"""Online hardware profiler benchmark (SIMULATED): hw_affinity=auto vs the hand-written mapping vs none.

    python tools/bench/profiler.py --quick    # Qwen3-8B on Fig. 11a's pool, 8 steps per configuration (< 60 s)
    python tools/bench/profiler.py            # 16 steps, Qwen3-8B/14B/32B, both pools

The workload and hardware are the affinity bench's (tools/bench/affinity.py, ``rollart.sim.hwsim``):
each step rolls out one batch of 512 trajectories, tasks uniform over FrozenLake, WebShop, GEM-Math and
GEM-game, on Fig. 11a's equal-cost pool (64 H800 + 24 H20) and (full run) on §7.1's (64 H800 + 32 H20). Three
configurations run the same steps with the same seeds (step i uses seed i; ``paired``: the same seed gives
the same trajectories - turns and lengths - whatever the routing):

* ``none``: no hw_affinity - every trajectory on the least-loaded engine of any class;
* ``manual``: the affinity bench's hand-written mapping (FrozenLake/WebShop -> H800, math/game -> H20);
* ``auto``: ``rollart.rollout.profiler.HardwareProfiler`` starting from no knowledge: it records every
  simulated request (task, class, prefill and decode tokens, wall seconds) and each step uses the mapping in
  force when the step starts (empty at first: the first step runs as ``none`` while it profiles).

Step time = the batch's rollout time (the last trajectory's end). ``auto`` counts its first, unmapped step.
Last line: ``auto_vs_manual=`` (manual s/step ÷ auto s/step; target ≥ 1.0), ``auto_vs_none=`` (target ≥ 1.1),
the same for §7.1's pool (``s71_*``, full run), ``auto_steady_vs_manual=`` (steps after the first mapping), and
``learned=`` the mapping auto ended with. Every figure is simulated.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from affinity import FROZENLAKE, GAME, MATH, MIX_ROUTING, TP, WEBSHOP  # noqa: E402

from rollart.rollout.profiler import HardwareProfiler  # noqa: E402
from rollart.sim.hwsim import RolloutSim, batch  # noqa: E402

MIX = [FROZENLAKE, WEBSHOP, MATH, GAME]
POOLS = {"fig11a": {"H800": 64, "H20": 24}, "s71": {"H800": 64, "H20": 32}}
BATCH = 512


def run(pools: dict[str, int], model: str, steps: int) -> dict:
    """Step times per configuration, the steps auto ran with a mapping, and auto's final mapping."""
    out: dict = {}
    for name, routing in (("none", {}), ("manual", MIX_ROUTING)):
        out[name] = [RolloutSim(pools, model, TP[model], routing, seed=s, paired=True).run(batch(MIX, BATCH)) for s in range(steps)]
    workers = {hw: gpus // TP[model] for hw, gpus in pools.items()}
    profiler = HardwareProfiler(workers)
    times, mapped = [], []
    for s in range(steps):
        mapping = dict(profiler.mapping)
        mapped.append(bool(mapping))
        times.append(RolloutSim(pools, model, TP[model], mapping, seed=s, observer=profiler.record,
                                paired=True).run(batch(MIX, BATCH)))
    out.update(auto=times, mapped=mapped, learned=dict(profiler.mapping), describe=profiler.describe(),
               changes=profiler.changes)
    return out


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def plot(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, ((pool, model), r) in zip(axes[0], results.items()):
        for name, style in (("none", "o-"), ("manual", "s-"), ("auto", "^-")):
            ax.plot(range(1, len(r[name]) + 1), r[name], style, label=f"{name} (mean {mean(r[name]):.0f} s)")
        ax.set_xlabel("step (seed)")
        ax.set_ylabel("simulated rollout step time (s)")
        ax.set_title(f"SIMULATED {model}, {'+'.join(f'{n} {hw}' for hw, n in POOLS[pool].items())}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("hw_affinity: none vs hand-written vs auto (profiler from no knowledge)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="Qwen3-8B on Fig. 11a's pool, 8 steps (< 60 s)")
    p.add_argument("--steps", type=int, default=0, help="steps per configuration (default 8 quick, 16 full)")
    args = p.parse_args(argv)
    t0 = time.time()
    steps = args.steps or (8 if args.quick else 16)
    models = ["Qwen3-8B"] if args.quick else ["Qwen3-8B", "Qwen3-14B", "Qwen3-32B"]
    pools = {"fig11a": POOLS["fig11a"]} if args.quick else POOLS
    results = {(pool, m): run(sizes, m, steps) for m in models for pool, sizes in pools.items()}
    print(f"SIMULATED - {BATCH} trajectories per step (FrozenLake/WebShop/GEM-Math/GEM-game), {steps} steps, "
          f"seeds 0..{steps - 1} for every configuration")
    print(f"{'pool':<8}{'model':<11}{'none s':>8}{'manual s':>10}{'auto s':>8}{'auto/steady':>12}"
          f"{'auto_vs_manual':>16}{'auto_vs_none':>14}   learned")
    for (pool, m), r in results.items():
        steady = [t for t, on in zip(r["auto"], r["mapped"]) if on]
        print(f"{pool:<8}{m:<11}{mean(r['none']):>8.1f}{mean(r['manual']):>10.1f}{mean(r['auto']):>8.1f}"
              f"{mean(steady) if steady else float('nan'):>12.1f}{mean(r['manual']) / mean(r['auto']):>16.3f}"
              f"{mean(r['none']) / mean(r['auto']):>14.3f}   {r['describe']}")
    plot({k: v for k, v in results.items() if k[1] == "Qwen3-8B"},
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots", "profiler.png"))
    r = results[("fig11a", "Qwen3-8B")]
    steady = [t for t, on in zip(r["auto"], r["mapped"]) if on]
    steady_manual = [t for t, on in zip(r["manual"], r["mapped"]) if on]
    figures = dict(auto_vs_manual=mean(r["manual"]) / mean(r["auto"]), auto_vs_none=mean(r["none"]) / mean(r["auto"]),
                   manual_vs_none=mean(r["none"]) / mean(r["manual"]),
                   auto_steady_vs_manual=mean(steady_manual) / mean(steady) if steady else float("nan"),
                   auto_changes=r["changes"])
    if ("s71", "Qwen3-8B") in results:
        s = results[("s71", "Qwen3-8B")]
        figures.update(s71_auto_vs_manual=mean(s["manual"]) / mean(s["auto"]),
                       s71_auto_vs_none=mean(s["none"]) / mean(s["auto"]))
    figures["seconds"] = time.time() - t0
    learned = ",".join(f"{t}:{hw}" for t, hw in sorted(r["learned"].items()))
    print(" ".join(f"{k}={v:.3f}" for k, v in figures.items()) + f" learned={learned}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
