"""Hardware-affinity benchmark (SIMULATED): H800 vs H20 for prefill- and decode-heavy agentic rollout.

    python tools/bench/affinity.py --quick    # Qwen3-8B only, < 60 s
    python tools/bench/affinity.py            # Qwen3-8B/14B/32B for the R1 ablation

A CPU cannot run H800s and H20s, so every figure here is **simulated** with rollart's speed model
(``rollart.hardware.SpeedModel``: roofline step time from RollArt Table 2 - H800 989.5 TFLOPS /
3.35 TB/s / 80 GB, H20 148 TFLOPS / 4 TB/s / 96 GB, normalized cost 2.85 : 1 - with paper-scale Qwen3
shapes, same MFU 0.5 / MBU 0.8 for both classes) driving a discrete-event model of trajectory-level
rollout with continuous batching, prefix caching, a KV budget and sticky routing
(``rollart.sim.hwsim``).

1. Fig. 4 (RollArt §3.1): Qwen3-8B on a cost-equivalent 2 x H800 vs 6 x H20, batch sizes 8-64.
   FrozenLake (prefill-heavy): 600-token prompt, 20-40 turns, each adding a 512-token visual
   observation and a 10-40-token action. GEM-Math (decode-heavy): 300-token prompt, 1-4 turns of
   1000-6000-token reasoning, 100-token tool outputs. Paper: FrozenLake on H800 as low as 0.53x the H20
   time; GEM-Math on H20 0.49-0.79x the H800 time.
2. Fig. 11a (§7.3 R1): one batch of 512 trajectories, tasks sampled uniformly from FrozenLake,
   WebShop (1500-token prompt, 5-30 turns of 1200-token pages and 30-150-token actions), GEM-Math and
   GEM-game (one turn, 500-3000 tokens) on 72 H800 vs 208 H20 vs 64 H800 + 24 H20 (equal cost), the
   mix routing FrozenLake/WebShop -> H800 and math/game -> H20 (hw_mapping). TP 1/2/4 for 8B/14B/32B.
   Paper: the mix is 1.12-1.37x faster than H800-only and 1.30-1.68x faster than H20-only.
3. §7.1's hardware (the end-to-end comparison of §7.2): the same 512-trajectory batch on the
   baselines' 96 rollout H800s vs ROLLART's 64 H800 + 32 H20 (a third of the H800s replaced count for
   count: 83 % of the cost), mix routed as above. This isolates what hardware affinity alone can add to
   ROLLART's step-time gain over AReaL (the paper credits that whole 1.22-1.36x gap to it, §7.2).
   The same comparison with the token profiles of async_training.py's CPU-scaled stand-ins (a report): where
   they show no such difference, hardware affinity cannot pay in that bench.
4. Live check: two real InferenceWorkers (the tiny model on this CPU) declared H800 and H20 with the
   speed model at time_scale 4, behind LLMProxy (task routing), run a prefill-heavy and a decode-heavy
   request set; the measured wall-time ratios are printed beside the model's prediction, showing that
   the workers really apply the modelled delays.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rollart.emulation import PAPER_TASKS, TaskProfile  # noqa: E402
from rollart.sim.hwsim import RolloutSim, batch  # noqa: E402

FROZENLAKE, WEBSHOP, MATH, GAME = (PAPER_TASKS[n] for n in ("frozenlake", "webshop", "math", "game"))
H800_ONLY, H20_ONLY = {"default": "H800"}, {"default": "H20"}
MIX_ROUTING = {"frozenlake": "H800", "webshop": "H800", "math": "H20", "game": "H20"}
TP = {"Qwen3-8B": 1, "Qwen3-14B": 2, "Qwen3-32B": 4}


def fig4(batch_sizes: list[int], tasks: tuple[TaskProfile, ...] = (FROZENLAKE, MATH)) -> dict:
    rows = {}
    for task in tasks:
        for bs in batch_sizes:
            h800 = RolloutSim({"H800": 2}, "Qwen3-8B", 1, H800_ONLY, seed=bs).run(batch([task], bs))
            h20 = RolloutSim({"H20": 6}, "Qwen3-8B", 1, H20_ONLY, seed=bs).run(batch([task], bs))
            rows[(task.name, bs)] = (h800, h20)
    return rows


def pools(models: list[str], configs: list[tuple[dict, dict]], size: int = 512) -> dict:
    """Rollout time of one batch of ``size`` trajectories (tasks uniform over the four profiles) on each
    (cluster, routing) config: {model: (seconds per config, in order)}. TP 1/2/4 for 8B/14B/32B."""
    mix = [FROZENLAKE, WEBSHOP, MATH, GAME]
    return {model: tuple(RolloutSim(cluster, model, TP[model], routing).run(batch(mix, size))
                         for cluster, routing in configs) for model in models}


FIG11A = [({"H800": 72}, H800_ONLY), ({"H20": 208}, H20_ONLY), ({"H800": 64, "H20": 24}, MIX_ROUTING)]
"""Fig. 11a's equal-cost pools: H800-only, H20-only, the affinity mix."""
S71 = [({"H800": 96}, H800_ONLY), ({"H800": 64, "H20": 32}, MIX_ROUTING)]
"""§7.1's rollout GPUs: the baselines' 96 H800 and ROLLART's 64 H800 + 32 H20."""


def cpu_scaled_fig4(batch_sizes: list[int]) -> dict:
    """Fig. 4's comparison run with the token profiles of async_training.py's tasks: whether its prefill- and
    decode-heavy stand-ins differ between H800 and H20 as the paper's tasks do (where they do not, hardware
    affinity cannot pay in that bench)."""
    from pathlib import Path

    from async_training import MODEL_SIZES, Workload
    from rollart.tools.make_tiny_model import make_tiny_model
    with tempfile.TemporaryDirectory() as tmp:
        model = str(make_tiny_model(Path(tmp) / "tiny", **MODEL_SIZES["small"]))
        profiles = Workload().profiles(model)
    return fig4(batch_sizes, tuple(profiles))


async def live_check() -> dict:
    """Real workers + proxy on the tiny model; H800/H20 wall-time ratios vs the speed model's."""
    from rollart.hardware import SpeedModel, StepWork
    from rollart.inference.worker import InferenceWorker
    from rollart.actors import LocalHandle
    from rollart.rollout.proxy import LLMProxy, ProxyConfig
    from rollart.tools.make_tiny_model import make_tiny_model

    model = str(make_tiny_model(tempfile.mkdtemp(prefix="affinity-"), seed=0))
    workers = [InferenceWorker(dict(model=model, num_kv_blocks=1024, max_num_batched_tokens=1024), name=hw,
                               hw_class=hw, speed=dict(hw_class=hw, time_scale=4.0)) for hw in ("H800", "H20")]
    proxy = LLMProxy([(w.name, w.hw_class, LocalHandle(w, w.name)) for w in workers],
                     ProxyConfig(hw_affinity={"on-h800": "H800", "on-h20": "H20"}, sticky=False))
    def prompts(n, length, salt):  # distinct prompts: nothing is served from the prefix cache
        return [[(salt * 131 + i * 37 + j * 11) % 500 + 3 for j in range(length)] for i in range(n)]
    sets = {"prefill": (lambda salt: prompts(4, 1000, salt), 2), "decode": (lambda salt: prompts(4, 3, salt), 96)}
    out = {}
    try:
        for kind, (make, max_tokens) in sets.items():
            # both classes at once, so the shared CPU's load affects them alike
            sampling = dict(temperature=0.0, ignore_eos=True, max_tokens=max_tokens)

            async def run(salt, task, hw):
                t0 = time.perf_counter()
                await asyncio.gather(*(proxy.generate(f"{kind}-{hw}-{i}", p, sampling, task=task)
                                       for i, p in enumerate(make(salt))))
                return time.perf_counter() - t0
            h800, h20 = await asyncio.gather(run(0, "on-h800", "H800"), run(1, "on-h20", "H20"))
            out[kind] = h800 / h20
    finally:
        for w in workers:
            await w.shutdown()
    m800, m20 = SpeedModel(hw_class="H800"), SpeedModel(hw_class="H20")
    pre = StepWork(prefill_tokens=4000, prefill_context=500)
    dec = StepWork(decode_seqs=4, decode_context_tokens=4 * 50)
    out["prefill_model"] = m800.step_seconds(pre) / m20.step_seconds(pre)
    out["decode_model"] = m800.step_seconds(dec) / m20.step_seconds(dec)
    return out


def plot(f4: dict, f11: dict, e2e: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 4))
    sizes = sorted({bs for _, bs in f4})
    fl = [f4[("frozenlake", bs)][0] / f4[("frozenlake", bs)][1] for bs in sizes]
    ma = [f4[("math", bs)][1] / f4[("math", bs)][0] for bs in sizes]
    a.plot(sizes, fl, "o-", label="FrozenLake: H800 time / H20 time")
    a.plot(sizes, ma, "s-", label="GEM-Math: H20 time / H800 time")
    a.axhline(0.53, color="C0", ls=":", label="paper FrozenLake best (0.53)")
    a.axhspan(0.49, 0.79, color="C1", alpha=0.15, label="paper GEM-Math (0.49-0.79)")
    a.axhline(1.0, color="k", lw=0.5)
    a.set_xscale("log", base=2)
    a.set_xlabel("batch size (trajectories)")
    a.set_ylabel("rollout time ratio (< 1: affinity class wins)")
    a.set_title("SIMULATED Fig. 4: 2xH800 vs 6xH20, Qwen3-8B")
    a.legend(fontsize=7)
    models = list(f11)
    x = range(len(models))
    a800 = [f11[m][0] / f11[m][2] for m in models]
    a20 = [f11[m][1] / f11[m][2] for m in models]
    b.bar([i - 0.2 for i in x], a800, 0.4, label="mix speedup over H800-only")
    b.bar([i + 0.2 for i in x], a20, 0.4, label="mix speedup over H20-only")
    b.axhspan(1.12, 1.37, color="C0", alpha=0.15, label="paper vs H800 (1.12-1.37)")
    b.axhspan(1.30, 1.68, color="C1", alpha=0.15, label="paper vs H20 (1.30-1.68)")
    b.axhline(1.0, color="k", lw=0.5)
    b.set_xticks(list(x), models)
    b.set_title("SIMULATED Fig. 11a: 72 H800 | 208 H20 | 64 H800 + 24 H20")
    b.legend(fontsize=7)
    models = list(e2e)
    c.bar(models, [e2e[m][0] / e2e[m][1] for m in models], label="64 H800 + 32 H20 speedup over 96 H800")
    c.axhspan(1.22, 1.36, color="C1", alpha=0.15, label="paper ROLLART vs AReaL (1.22-1.36), credited to affinity")
    c.axhline(1.0, color="k", lw=0.5)
    c.set_title("SIMULATED §7.1 hardware: 96 H800 vs 64 H800 + 32 H20")
    c.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="Qwen3-8B only (< 60 s)")
    p.add_argument("--no-live", action="store_true", help="skip the live check with real workers")
    args = p.parse_args(argv)
    t0 = time.time()
    f4 = fig4([8, 16, 32, 64])
    print("SIMULATED Fig. 4 - Qwen3-8B, 2 x H800 vs 6 x H20 (cost-equivalent), rollout time of one batch")
    print(f"{'task':<11}{'batch':>6}{'H800 s':>9}{'H20 s':>9}{'ratio':>8}   paper")
    for (task, bs), (h800, h20) in f4.items():
        ratio, what = (h800 / h20, "H800/H20, as low as 0.53") if task == "frozenlake" else \
            (h20 / h800, "H20/H800, 0.49-0.79")
        print(f"{task:<11}{bs:>6}{h800:>9.1f}{h20:>9.1f}{ratio:>8.2f}   {what}")
    scaled = cpu_scaled_fig4([8, 16, 32, 64])
    print("\nSIMULATED Fig. 4 with async_training.py's CPU-scaled tasks (token profiles from its model's tokenizer, "
          "FrozenLake's turns at their cap): time on 6 x H20 / time on 2 x H800 at batch 8, 16, 32, 64 (the paper's "
          "GEM-Math 0.49-0.79, its FrozenLake 1 / 0.53 = 1.9 and more)")
    for task in dict.fromkeys(t for t, _ in scaled):
        print(f"{task:<12} " + " ".join(f"{h20 / h800:.2f}" for (t, _), (h800, h20) in scaled.items() if t == task))
    models = ["Qwen3-8B"] if args.quick else ["Qwen3-8B", "Qwen3-14B", "Qwen3-32B"]
    f11 = pools(models, FIG11A)
    print("\nSIMULATED Fig. 11a - 512 trajectories (FrozenLake/WebShop/GEM-Math/GEM-game), equal-cost pools")
    print(f"{'model':<11}{'H800-only':>10}{'H20-only':>10}{'mix':>8}{'vs H800':>9}{'vs H20':>8}   paper: 1.12-1.37 / 1.30-1.68")
    for m, (h800, h20, both) in f11.items():
        print(f"{m:<11}{h800:>10.0f}{h20:>10.0f}{both:>8.0f}{h800 / both:>9.2f}{h20 / both:>8.2f}")
    e2e = pools(models, S71)
    print("\nSIMULATED §7.1 hardware - the same 512 trajectories on the baselines' 96 rollout H800s vs ROLLART's "
          "64 H800 + 32 H20 (83 % of the cost)")
    print(f"{'model':<11}{'96 H800':>9}{'mix':>8}{'speedup':>9}   paper ROLLART/AReaL: 1.22-1.36, credited to affinity")
    for m, (h800, both) in e2e.items():
        print(f"{m:<11}{h800:>9.0f}{both:>8.0f}{h800 / both:>9.2f}")
    live = {}
    if not args.no_live:
        live = asyncio.run(live_check())
        print(f"\nlive check (real workers, tiny model, time_scale 4): H800/H20 wall time "
              f"prefill-heavy {live['prefill']:.2f} (model {live['prefill_model']:.2f}), "
              f"decode-heavy {live['decode']:.2f} (model {live['decode_model']:.2f})")
    plot(f4, f11, e2e, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots", "affinity.png"))
    fl = [h800 / h20 for (t, _), (h800, h20) in f4.items() if t == "frozenlake"]
    ma = [h20 / h800 for (t, _), (h800, h20) in f4.items() if t == "math"]
    s8 = f11["Qwen3-8B"]
    figures = dict(sim_fl_h800_over_h20_best=min(fl), sim_math_h20_over_h800_best=min(ma),
                   sim_math_h20_over_h800_worst=max(ma), sim_mix_vs_h800_8b=s8[0] / s8[2],
                   sim_mix_vs_h20_8b=s8[1] / s8[2], sim_s71_mix_vs_h800_8b=e2e["Qwen3-8B"][0] / e2e["Qwen3-8B"][1])
    if not args.quick:
        figures.update({f"sim_s71_mix_vs_h800_{m.split('-')[1].lower()}": e2e[m][0] / e2e[m][1] for m in e2e})
    if live:
        figures.update(live_prefill_h800_over_h20=live["prefill"], live_decode_h800_over_h20=live["decode"])
    figures["seconds"] = time.time() - t0
    print(" ".join(f"{k}={v:.2f}" for k, v in figures.items()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
