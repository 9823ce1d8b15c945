"""Time to score, as RollArt Fig. 10a measures it: wall time from scratch to a greedy-success target, per mode.

    python tools/bench/time_to_score.py --quick     # one seed, rollart α=1 and Sync+, a low target (< 60 s;
                                                    # with --profile paper also One-off and AReaL-style)
    python tools/bench/time_to_score.py             # six modes × 3 seeds, interleaved (~40 min, see below)
    python tools/bench/time_to_score.py --out DIR   # also DIR/time_to_score.json after every run, the plot in DIR
    python tools/bench/time_to_score.py --profile paper [--quick]   # every role on emulated hardware, calibrated
                                                    # from RollArt's Qwen3-8B step (tools/bench/tts_paper.py)
    python tools/bench/time_to_score.py --first-seed 1 --seeds 2 --with DIR/time_to_score.json   # more seeds
                                                    # (or other modes), summarised with an earlier invocation's
                                                    # (same settings, no (mode, seed) run twice)

Workload: the quickstart (recipes/grpo_frozenlake.py) as it is: FrozenLake 4x4 non-slippery, each episode
starting on a random one of the 11 frozen cells (trajectories of 1 to 12 turns: a long tail of lengths), the
position spelt out, reward 1 at the goal and -0.1 per invalid answer; the quickstart's starting model, one per
seed (the 0.9M-parameter tiny model after its format warm-up: it answers with a letter, evenly over the moves
its cell allows, and knows nothing of the way; built once per seed, shared by that seed's modes, not timed: the
paper's runs also start from a pretrained model), 4 groups × 16 episodes per step, AdamW lr 5e-4, entropy bonus 0.01. Only
the mode changes:

* ``sync``: Sync — rollout, then training, then the weight update, with env interaction batched (each turn
  waits for every env of the batch: verl-style lockstep);
* ``syncplus``: Sync+ — the same with trajectory-level env interaction (``mode=sync``);
* ``oneoff``: One-off — batch k+1 rolls out with weights k-1 while batch k trains;
* ``areal``: AReaL-style — α=1 checked only when a trajectory starts, in-flight ones never aborted;
* ``rollart``: ROLLART α=1 — the per-turn bound, stale trajectories aborted (the quickstart's default mode);
* ``rollart_a2``: ROLLART α=2.
The mode settings are tools/bench/async_training.py's (the pipeline's ``mode`` and ``alpha``), without that
bench's simulated hardware: here nothing is simulated. Same hardware for every mode, as in the paper: the
trainer process on the first core, rollout (this coordinator, the inference worker, the env host) on the others
(RollArt R4, training and rollout on separate GPUs); a synchronous mode leaves one side idle while the other
works, which is what the asynchronous modes recover.

Score: every 5 steps the policy plays greedily once from each of the 11 start cells (a fraction k/11; the map
is fixed, so these are the states training samples from). A run reaches the target when ``--consecutive``
evaluations in a row are >= ``--target``; its time to target is the training wall time of the step whose
evaluation completed that run. A run that does not get there within ``--budget-s`` is CENSORED at the budget
(reported as ">= budget", never dropped): a median that falls on a censored run is itself a lower bound, and a
ratio built on one is a bound (``tts_vs_*_bound=lower|upper|none``; ``exact`` when both medians were reached).

Duration: 18 runs of at most ``--budget-s`` (300 s) of training plus a few seconds of start-up each, and one
format warm-up per seed (~20 s then; ~40 s since the warm-up's 200 steps of 2026-12-03): 38 minutes on a quiet
machine (2026-11-25), where the runs took 35-119 steps (73-300 s) to the target at 1.9-2.5 s/step.

Runs are interleaved (seed s: every mode, in an order rotated by s; then seed s+1) so that the load of this
shared machine falls on the modes alike; each run's line carries its UTC time and load averages.

What a time to target is made of: each run's line gives its steps, s/step (the trainer's wait for its batch and its
train step), trajectories aborted (and the groups whose instance was dealt again, untrained) and the staleness of
the trained tokens (versions behind the trainer's weights, the trainer's ``rollout/staleness_mean`` averaged over
the steps); a line before the last gives each mode's medians.

Last line: ``tts_vs_syncplus= tts_vs_oneoff= tts_vs_areal=`` — median time to target of the baseline ÷ median of
rollart α=1 (> 1: rollart is faster; RollArt Fig. 10a: 2.05, 1.35, 1.31), then ``tts_vs_sync=``,
``tts_a1_vs_a2=``, the bounds, ``step_vs_<baseline>=`` (a report: the median s/step of the baseline ÷ rollart's,
what the judged ratio would read if every mode needed the same steps), censored counts and settings.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import envs  # noqa: E402,F401
from async_training import MODES as ASYNC_MODES, split_cores, start_trainer  # noqa: E402
from recipes.grpo_frozenlake import START_CELLS, TASK, default_config, starting_model  # noqa: E402
from rollart.config import exit_on_config_error  # noqa: E402
from rollart.actors import ActorSystem  # noqa: E402
from rollart.config import apply_overrides, apply_values  # noqa: E402
from rollart.pipeline import Coordinator, PipelineConfig  # noqa: E402
from rollart.messages import ResetTrainer  # noqa: E402
from rollart.sim.batched import BatchedInteraction  # noqa: E402
import tts_paper  # noqa: E402
from tts_stats import Summary, TimeToTarget, format_summary, run_order, summarize, time_to_target, tts_ratio  # noqa: E402


def _mode_of(name: str) -> dict:
    """The pipeline settings that make a mode in async_training.py (its hardware settings left out)."""
    return {k: v for k, v in ASYNC_MODES[name].items() if k in ("mode", "alpha")}


MODES: dict[str, dict] = {
    "sync": _mode_of("syncplus"),  # with batched interaction (BATCHED)
    "syncplus": _mode_of("syncplus"),
    "oneoff": _mode_of("oneoff"),
    "areal": _mode_of("areal"),
    "rollart": _mode_of("rollart"),
    "rollart_a2": {**_mode_of("rollart"), "alpha": 2},
}
BATCHED = {"sync"}
"""Modes whose rollout interacts in lockstep batches (rollart.sim.batched), not trajectory by trajectory."""
BASELINES = {"syncplus": "tts_vs_syncplus", "oneoff": "tts_vs_oneoff", "areal": "tts_vs_areal", "sync": "tts_vs_sync"}
PAPER = {"tts_vs_syncplus": 2.05, "tts_vs_oneoff": 1.35, "tts_vs_areal": 1.31}
"""RollArt §7.2 "Model Convergence" on Fig. 10a (Qwen3-32B, time to a validation score)."""


# ---------------------------------------------------------------------------- runs
def utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def load_avg() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def bench_config(model: str, logdir: str, seed: int, args) -> PipelineConfig:
    """The quickstart's config (model, batch, optimizer, task, evaluation) with the bench's stop and budget."""
    return dataclasses.replace(
        default_config(), model=model, warmup_steps=0, logdir=logdir, seed=seed, total_steps=100_000, quiet=True,
        checkpoint_every=0, eval_at_end=False, eval_every=args.eval_every, eval_episodes=START_CELLS,
        stop_at_success=args.target, stop_consecutive=args.consecutive, time_limit_s=args.budget_s)


async def run_one(name: str, cfg: PipelineConfig, trainer, args, task=TASK) -> dict:
    await trainer.send(ResetTrainer())
    load0, t0 = load_avg(), utc()
    interaction = BatchedInteraction if name in BATCHED else None
    result = await Coordinator(cfg, [task], eval_tasks=[TASK], trainer=trainer, interaction=interaction).run()
    elapsed_at = {h["step"]: h["system/elapsed_s"] for h in result.history}
    evals = [(step, s["FrozenLake"]) for step, s in result.evals]
    tt = time_to_target(evals, elapsed_at, args.target, args.consecutive, args.budget_s)
    steps = len(result.history)
    train_s = result.history[-1]["system/elapsed_s"] if result.history else 0.0
    real = sum(w.get("engine_seconds", 0.0) for w in result.workers.values())
    sim = sum(w.get("simulated_scaled_seconds", 0.0) for w in result.workers.values())
    outran = sum(h.get("system/train_outran", 0.0) for h in result.history)
    lag = {"token": mean_over(result.history, "rollout/staleness_mean"),  # the trainer's, over the trained tokens
           "traj": mean_over(result.history, "rollout/staleness_traj_mean")}
    wait_s, step_train_s = (mean_over(result.history, f"system/{k}_s") for k in ("get_batch_wait", "train"))
    out = dict(mode=name, seed=cfg.seed, seconds=tt.seconds, budget_s=tt.budget_s, censored=tt.censored,
               real_vs_emulated=real / sim if sim else float("nan"), train_outran=int(outran),
               steps=steps, train_wall_s=train_s, s_per_step=train_s / max(steps, 1),
               staleness_token_mean=lag["token"], staleness_traj_mean=lag["traj"],
               batch_wait_s=wait_s, train_s=step_train_s,
               aborted={k.split("/", 1)[1]: v for k, v in result.buffer.items() if k.startswith("aborted/")},
               dealt_again=int(result.rollout.get("groups_dealt_again", 0)),
               curve=[(elapsed_at[step], s) for step, s in evals if step in elapsed_at],
               utc_start=t0, utc_end=utc(), load_start=load0, load_end=load_avg())
    reached = f"{tt.seconds:.0f} s" if tt.seconds is not None else f"CENSORED (>= {tt.budget_s:.0f} s)"
    print(f"[{out['utc_end']} UTC, load {out['load_end']}] seed {cfg.seed} {name:>10}: time to target {reached}; "
          f"{steps} steps in {train_s:.0f} s ({out['s_per_step']:.2f} s/step: the trainer waited {two(wait_s)} s "
          f"for its batch and trained {two(step_train_s)} s), trajectories aborted "
          f"{sum(out['aborted'].values())}{' ' + str(out['aborted']) if out['aborted'] else ''} (groups dealt again "
          f"{out['dealt_again']}), staleness of the trained tokens "
          f"{two(lag['token'])} (of each trajectory's oldest {two(lag['traj'])})"
          + (f", real/emulated engine {out['real_vs_emulated']:.2f}, train steps outrun {out['train_outran']}"
             if cfg.simulate_hardware else "") + "; greedy success by step: "
          + " ".join(f"{step}:{s:.2f}" for step, s in evals), flush=True)
    return out


def two(value: float) -> str:
    """Two decimals, or "-" for what was not measured (a synchronous step has no wait for a batch: nan)."""
    return "-" if math.isnan(value) else f"{value:.2f}"


def mean_over(history: list[dict], key: str) -> float:
    """The mean over a run's steps of one logged metric (nan when no step logged it)."""
    values = [h[key] for h in history if key in h]
    return sum(values) / len(values) if values else float("nan")


def breakdown(rows: list[dict], modes: list[str]) -> str:
    """Per mode, what its time to target is made of: median steps, s/step, staleness, aborts over its runs."""
    parts = []
    for m in modes:
        runs = [r for r in rows if r["mode"] == m]
        if runs:
            def med(key: str) -> str:  # over the runs that measured it (older runs lack the newer keys)
                values = [r[key] for r in runs if not math.isnan(r.get(key, math.nan))]
                return two(median(values)) if values else "-"
            parts.append(f"{m} {median([r['steps'] for r in runs]):.0f} steps x {med('s_per_step')} s (batch wait "
                         f"{med('batch_wait_s')}, train {med('train_s')}), staleness {med('staleness_token_mean')}, "
                         f"aborted {median([sum(r['aborted'].values()) for r in runs]):.0f}")
    return ("medians over seeds (steps run x s/step (the trainer's wait for its batch, its train step), "
            "staleness of the trained tokens, trajectories aborted): " + "; ".join(parts))


async def run_seed(seed: int, index: int, modes: list[str], args, tmp: str) -> list[dict]:
    model = starting_model(tmp, seed, args.warmup_steps)
    trainer_cpus, rollout_cpus = split_cores() if args.split_cores else ((), ())
    base = apply_overrides(dataclasses.replace(bench_config(model, tmp, seed, args), rollout_cpus=rollout_cpus),
                           args.set)
    rows = []
    async with ActorSystem(heartbeat_interval=1.0, heartbeat_timeout=60.0) as system:
        trainer = await start_trainer(system, base, model, trainer_cpus)  # one trainer per seed, reset per mode
        task, cal = TASK, None
        if args.profile == "paper":  # the emulated hardware's times, from one short Sync+ run of this seed
            base = dataclasses.replace(base, actor_mode=tts_paper.ACTOR_MODE)
            cal = await tts_paper.calibrate(base, TASK, trainer,
                                            **(dict(steps=2, tries=1, fit_trainer=False) if args.quick else {}))
            print(f"[{utc()} UTC] seed {seed} {cal.line}", flush=True)
            task = tts_paper.with_latency(TASK, cal)
        for name in run_order(modes, index):
            cfg = apply_values(dataclasses.replace(base, run_name=f"{name}-seed{seed}"), MODES[name])
            if cal is not None:
                cfg = tts_paper.apply(cfg, cal)
            rows.append(await run_one(name, cfg, trainer, args, task))
    return rows


def summaries(rows: list[dict], modes: list[str]) -> dict[str, Summary]:
    return {m: summarize([TimeToTarget(r["seconds"], r["budget_s"]) for r in rows if r["mode"] == m])
            for m in modes if any(r["mode"] == m for r in rows)}


def plot(rows: list[dict], modes: list[str], args, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = dict(zip(MODES, ["tab:gray", "tab:brown", "tab:blue", "tab:orange", "tab:green", "tab:olive"]))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for m in modes:
        for i, r in enumerate(r for r in rows if r["mode"] == m):
            xs, ys = [t for t, _ in r["curve"]], [s for _, s in r["curve"]]
            if xs:  # the end marker: o = target held, x = censored at the budget
                ax.plot(xs, ys, color=colors[m], alpha=0.8, lw=1.2, label=m if i == 0 else None,
                        marker="x" if r["censored"] else "o", markevery=[len(xs) - 1])
    ax.axhline(args.target, color="black", ls="--", lw=0.8, label=f"target {args.target:g} (x{args.consecutive})")
    ax.axvline(args.budget_s, color="black", ls=":", lw=0.8, label="budget")
    ax.set_xlabel("training wall time (s), SIMULATED timing: every role on emulated hardware (--profile paper)"
                  if args.profile == "paper" else "training wall time (s), CPU-real: nothing simulated")
    ax.set_ylabel(f"greedy success ({START_CELLS} start cells)")
    ax.set_title("Fig. 10a analogue: FrozenLake (random starts), a line per seed; o reached, x censored",
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


SAME_SETTINGS = ("profile", "target", "consecutive", "eval_every", "budget_s", "split_cores", "set", "warmup_steps")
"""What an earlier invocation given with --with must share with this one."""


def earlier_rows(args, modes: list[str]) -> list[dict]:
    """The runs of the --with files; SystemExit naming the file and the setting when one differs from this
    invocation's or repeats a (mode, seed) run of it (``modes``) or of another file."""
    rows: list[dict] = []
    mine = {(m, s) for m in modes for s in range(args.first_seed, args.first_seed + args.seeds)}
    for name in args.earlier:
        try:
            data = json.loads(Path(name).read_text())
            theirs = data["args"]
            new = data["rows"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"--with {name}: not a time_to_score.json of this bench ({e})") from None
        differ = [k for k in SAME_SETTINGS if theirs.get(k) != getattr(args, k)]
        if differ:
            raise SystemExit(f"--with {name}: its runs used other settings ("
                             + ", ".join(f"{k}={theirs.get(k)!r}, here {getattr(args, k)!r}" for k in differ)
                             + "); give the same settings")
        seen = {(r["mode"], r["seed"]) for r in rows} | mine
        again = sorted({(r["mode"], r["seed"]) for r in new} & seen)
        if again:
            raise SystemExit(f"--with {name}: runs (mode, seed) {again} are run here or in another --with file; "
                             "give other seeds or modes")
        rows += new
    return rows


def step_ratio(rows: list[dict], base: str, mode: str = "rollart") -> float:
    """A report beside each judged key: the baseline's median s/step over rollart α=1's. A time to target is steps
    times s/step; the steps to a target spread between runs of one mode far more than a step's length does, so this
    is the part of the judged ratio that three seeds measure well (what it would read if every mode needed as many
    steps)."""
    def med(m: str) -> float:
        return median([r["s_per_step"] for r in rows if r["mode"] == m])
    return med(base) / med(mode)


def final_line(rows: list[dict], modes: list[str], args) -> str:
    summ = summaries(rows, modes)
    parts = []
    if "rollart" in summ:
        for base, key in BASELINES.items():
            if base in summ:
                value, bound = tts_ratio(summ[base], summ["rollart"])
                parts.append(f"{key}={value:.2f} {key}_bound={bound}")
        parts += [f"step_vs_{base}={step_ratio(rows, base):.2f}" for base in BASELINES if base in summ]
        if "rollart_a2" in summ:
            value, bound = tts_ratio(summ["rollart_a2"], summ["rollart"])
            parts.append(f"tts_a1_vs_a2={value:.2f} tts_a1_vs_a2_bound={bound}")
        parts.append(f"rollart_tts_median_s={summ['rollart'].median:.0f}")
    parts.append("censored=" + ",".join(f"{m}:{s.censored}/{s.runs}" for m, s in summ.items()))
    if args.profile == "paper":
        outran = sum(r["train_outran"] for r in rows)
        parts.append(f"real_vs_emulated_max={max(r['real_vs_emulated'] for r in rows):.2f} train_outran={outran} "
                     "timing=" + ("SIMULATED" if not outran else "MIXED(train steps at this CPU's speed)"))
    parts.append(f"target={args.target:g}x{args.consecutive} budget_s={args.budget_s:g} "
                 f"seeds={len({r['seed'] for r in rows})} "
                 f"profile={args.profile} measure=time_to_score" + ("_quick" if args.quick else ""))
    return " ".join(parts)


@exit_on_config_error()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="one seed of rollart and syncplus to a low target (0.15 once, evaluated every step, "
                         "budget 10 s, a 20-step warm-up)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    ap.add_argument("--profile", default="cpu", choices=("cpu", "paper"),
                    help="cpu: every role at this CPU's speed (default); paper: every role on emulated hardware, "
                         "calibrated from RollArt's Qwen3-8B step (tools/bench/tts_paper.py)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per mode (default %(default)s; 0 with --with)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.7,
                    help="greedy success to reach (default %(default)s: 8 of the 11 start cells)")
    ap.add_argument("--consecutive", type=int, default=2, help="evaluations in a row at the target")
    ap.add_argument("--eval-every", type=int, default=5, help="steps between greedy evaluations")
    ap.add_argument("--budget-s", type=float, default=300.0,
                    help="training seconds per run; a run not at the target by then is censored (default %(default)s)")
    ap.add_argument("--split-cores", action=argparse.BooleanOptionalAction, default=True,
                    help="trainer process on core 0, rollout on the other cores, every mode alike (default on)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a pipeline setting for every mode, e.g. --set trainer.lr=1e-3 (repeatable)")
    ap.add_argument("--warmup-steps", type=int, default=default_config().warmup_steps,
                    help="format warm-up of each seed's starting model, shared by its modes and not timed "
                         "(default: the quickstart's, %(default)s; --quick: 20)")
    ap.add_argument("--out", default="", help="folder for time_to_score.json (rewritten after every run) and the plot")
    ap.add_argument("--plot", default="", help="plot path (default: OUT/time_to_score.png, else tools/bench/plots/)")
    ap.add_argument("--with", dest="earlier", action="append", default=[], metavar="JSON",
                    help="the runs of an earlier invocation (its --out folder's time_to_score.json) with the same "
                         "settings and other seeds or modes, summarised with these (repeatable)")
    args = ap.parse_args()
    if args.quick:
        args.modes, args.seeds, args.target, args.consecutive = "rollart,syncplus", 1, 0.15, 1
        args.budget_s, args.eval_every, args.warmup_steps = 10.0, 1, 20
        if args.profile == "paper":  # all three judged keys; one group a step (a quarter of the real train step,
            args.modes = "rollart,syncplus,oneoff,areal"  # which sets the time scale: tools/bench/tts_paper.py)
            args.set = ["batch_groups=1", *args.set]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise SystemExit(f"--modes {args.modes!r}: unknown {unknown}; choose from {', '.join(MODES)}")
    if not 0 < args.target <= 1 or args.seeds < (0 if args.earlier else 1) or args.budget_s <= 0 or args.consecutive < 1:
        raise SystemExit("need 0 < --target <= 1, --seeds >= 1 (0 with --with: summarise those runs), --budget-s > 0, "
                         "--consecutive >= 1")
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    plot_path = Path(args.plot) if args.plot else (out / "time_to_score.png" if out else
                                                     Path(__file__).parent / "plots" / "time_to_score.png")
    logging.basicConfig(level=logging.ERROR)
    last = args.first_seed + args.seeds - 1
    print(f"[{utc()} UTC, load {load_avg()}] modes {modes}, seeds {args.first_seed}..{last}, "
          f"target {args.target:g} on {args.consecutive} evaluations in a row, budget {args.budget_s:g} s per run; "
          f"cores {sorted(os.sched_getaffinity(0))} (split trainer/rollout: {args.split_cores})", flush=True)
    rows: list[dict] = earlier_rows(args, modes)
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.seeds):
            seed = args.first_seed + index
            rows += asyncio.run(run_seed(seed, index, modes, args, tmp))
            if out:
                (out / "time_to_score.json").write_text(json.dumps(
                    {"args": vars(args), "rows": rows}, indent=1, default=str))
            if not args.quick or args.plot:
                plot(rows, modes, args, plot_path)
            print(f"[{utc()} UTC, load {load_avg()}] after seed {seed}: " + "; ".join(
                f"{m} {format_summary(s)}" for m, s in summaries(rows, modes).items()), flush=True)
    if not args.seeds:
        plot(rows, modes, args, plot_path)
    print(breakdown(rows, modes), flush=True)
    print("PAPER (Fig. 10a): " + " ".join(f"{k}={v}" for k, v in PAPER.items()) + (
        "; every role on emulated hardware (tools/bench/tts_paper.py), the learning real; timing: the last line"
        if args.profile == "paper" else "; REAL: everything (CPU)"))
    print(final_line(rows, modes, args))


if __name__ == "__main__":
    main()
