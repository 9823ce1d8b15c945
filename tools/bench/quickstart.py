"""The quickstart's overhead: rollart's full pipeline vs a hand-written single-process GRPO loop, over seeds.

    python tools/bench/quickstart.py --quick     # 2 steps of each, 1 seed: time per training step (a smoke test)
    python tools/bench/quickstart.py             # each until the quickstart's target (or 15 min), 3 seeds

Both train the same starting model (the quickstart's: tiny, format-warmed; one per seed) on the quickstart's task
(recipes/grpo_frozenlake.py: FrozenLake with random starts over the 11 frozen cells, the position spelt out)
with the same chat format, batch (groups x group size), reward, optimiser, learning rate, entropy bonus and KL
penalty to the starting model,
and score alike: every 5 steps a greedy episode from each of the 11 start cells (the same reset seeds as the
pipeline's evaluation), the target (greedy success >= 0.9) held on two evaluations in a row. The hand-written
loop is what one writes without a framework: one process, batched full-recompute forward per turn (no KV
cache, no actors), a plain GRPO policy-gradient step with the entropy bonus and the KL penalty. rollart runs its
actors, engine,
buffer and trainer. Seeds are interleaved (seed s: both sides, the side that goes first alternating), each
run's line carries its UTC time and load average; a run that misses the target is censored at the budget.
Last line: ``system_vs_loop_step=`` (median over seeds of rollart s/step ÷ loop s/step) and, without --quick,
``system_vs_loop_time_to_target=`` (median time to target of rollart ÷ the loop's, with its bound); the
goal is <= 2.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import envs  # noqa: E402,F401
from recipes.grpo_frozenlake import START_CELLS, TASK, default_config, starting_model  # noqa: E402
from rollart.config import exit_on_config_error  # noqa: E402
from rollart.models import load_model, load_tokenizer  # noqa: E402
from rollart.pipeline import Coordinator  # noqa: E402
from rollart.rollout.chat import ChatFormat  # noqa: E402
from rollart.trainer.losses import (entropy_bonus, group_advantages, kl_penalty, token_entropy,  # noqa: E402
                                    token_logprobs)
from tts_stats import TimeToTarget, format_summary, summarize, time_to_target, tts_ratio  # noqa: E402

QUICK_STEPS = 2
"""Training steps per side under --quick: one seed of 2 steps each keeps it under a minute (4 steps of 3 seeds took
3 min; the loop's step is 6-8 s here), so its ratio is a smoke test, not a figure."""

EVAL_SEED = 10_000
"""The pipeline's evaluation plays reset seeds EVAL_SEED + i (rollart.pipeline.coordinator): the loop uses the same."""


# ---------------------------------------------------------------------------- the hand-written loop
def play(model, chat: ChatFormat, groups: int, group_size: int, max_turns: int, rng: random.Random,
         greedy: bool = False, seeds: list[int] | None = None):
    """Play groups x group_size episodes (a group shares its reset seed: ``seeds``, else drawn from ``rng``);
    returns (token ids, model-token masks, rewards, successes, group ids)."""
    n = groups * group_size
    seeds = seeds if seeds is not None else [rng.randrange(2**31) for _ in range(groups)]
    envs_ = [gym.make(TASK.env_id, **TASK.env_kwargs) for _ in range(n)]
    seqs, masks, rewards, success, done = [], [], [0.0] * n, [False] * n, [False] * n
    for i, env in enumerate(envs_):
        obs, _ = env.reset(seed=seeds[i // group_size])
        seqs.append(chat.first_prompt(obs))
        masks.append([0] * len(seqs[-1]))
    for _ in range(max_turns):
        active = [i for i in range(n) if not done[i]]
        if not active:
            break
        width = max(len(seqs[i]) for i in active)
        ids = torch.zeros(len(active), width, dtype=torch.long)
        for row, i in enumerate(active):
            ids[row, :len(seqs[i])] = torch.tensor(seqs[i])
        last = torch.tensor([len(seqs[i]) - 1 for i in active])
        with torch.no_grad():
            logits = model(ids)[torch.arange(len(active)), last]  # (A, V)
        tokens = logits.argmax(-1) if greedy else torch.multinomial(logits.softmax(-1), 1).squeeze(-1)
        for row, i in enumerate(active):
            token = int(tokens[row])
            seqs[i].append(token)
            masks[i].append(1)
            obs, reward, terminated, truncated, info = envs_[i].step(chat.action_text([token]))
            rewards[i] += reward
            if terminated or truncated:
                done[i], success[i] = True, bool(info.get("success"))
            else:
                follow = chat.next_turn(obs, [token])
                seqs[i].extend(follow)
                masks[i].extend([0] * len(follow))
    return seqs, masks, rewards, success, [i // group_size for i in range(n)]


def train_step(model, ref, opt, seqs, masks, rewards, group_ids, grad_clip: float, entropy_coef: float,
               kl_coef: float) -> None:
    adv = group_advantages(rewards, [str(g) for g in group_ids], eps=1e-4)  # (N,)
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width)
    for r, (s, m) in enumerate(zip(seqs, masks)):
        ids[r, :len(s)], mask[r, :len(m)] = torch.tensor(s), torch.tensor(m, dtype=torch.float)
    logits = model(ids)  # (N, T, V)
    logp = token_logprobs(logits, ids)  # (N, T)
    loss = -(adv[:, None] * logp * mask).sum() / mask.sum()
    if entropy_coef > 0:
        loss = loss - entropy_coef * entropy_bonus(token_entropy(logits), mask, float(mask.sum()))
    if kl_coef > 0:  # to the starting model, as the trainer's reference
        with torch.no_grad():
            ref_logp = token_logprobs(ref(ids), ids)
        loss = loss + kl_coef * kl_penalty(logp, ref_logp, mask, float(mask.sum()))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()


def run_loop(model_dir: str, steps: int, target: float | None, budget_s: float, eval_every: int, seed: int):
    """Returns (steps, training seconds, TimeToTarget or None without a target, [(step, greedy success)])."""
    torch.manual_seed(seed)
    cfg = default_config()
    model = load_model(model_dir)
    ref = load_model(model_dir).eval() if cfg.trainer.kl_coef > 0 else None
    chat = ChatFormat(load_tokenizer(model_dir), gym.make(TASK.env_id).unwrapped.system_prompt)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.trainer.lr)
    rng = random.Random(seed)
    t0 = time.perf_counter()
    step, evals, elapsed_at, held = 0, [], {}, 0
    while step < steps and time.perf_counter() - t0 < budget_s:
        seqs, masks, rewards, _, groups = play(model, chat, cfg.batch_groups, cfg.rollout.group_size, TASK.max_turns,
                                                 rng)
        train_step(model, ref, opt, seqs, masks, rewards, groups, cfg.trainer.grad_clip, cfg.trainer.entropy_coef,
                   cfg.trainer.kl_coef)
        step += 1
        elapsed_at[step] = time.perf_counter() - t0
        if target is not None and step % eval_every == 0:  # every start cell once, greedily, as the pipeline does
            _, _, _, ok, _ = play(model, chat, START_CELLS, 1, TASK.max_turns, rng, greedy=True,
                                  seeds=[EVAL_SEED + i for i in range(START_CELLS)])
            evals.append((step, sum(ok) / len(ok)))
            held = held + 1 if evals[-1][1] >= target else 0
            if held >= cfg.stop_consecutive:
                break
    reached = time_to_target(evals, elapsed_at, target, cfg.stop_consecutive, budget_s) if target is not None else None
    return step, time.perf_counter() - t0, reached, evals


# ---------------------------------------------------------------------------- rollart
def run_system(model_dir: str, steps: int, target: float | None, budget_s: float, eval_every: int, seed: int,
               logdir: str):
    cfg = dataclasses.replace(default_config(), model=model_dir, warmup_steps=0, total_steps=steps, seed=seed,
                              logdir=logdir, eval_every=eval_every if target else 0, stop_at_success=target,
                              time_limit_s=budget_s, quiet=True, checkpoint_every=0)
    t0 = time.perf_counter()
    result = asyncio.run(Coordinator(cfg, [TASK]).run())
    elapsed = result.history[-1]["system/elapsed_s"] if result.history else time.perf_counter() - t0
    evals = [(step, success["FrozenLake"]) for step, success in result.evals]
    elapsed_at = {h["step"]: h["system/elapsed_s"] for h in result.history}
    reached = time_to_target(evals, elapsed_at, target, cfg.stop_consecutive, budget_s) if target is not None else None
    return result.steps, elapsed, reached, evals


def spread(values: list[float]) -> str:
    values = sorted(values)
    return f"median {statistics.median(values):.2f}, range {values[0]:.2f}-{values[-1]:.2f}"


def plot(rows: list[dict], path: Path, full: bool) -> None:
    """Seconds per step and (full run) seconds to target of rollart and the hand-written loop: median bar, every
    seed a dot (a hollow dot: censored at the budget)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2 if full else 1, figsize=(9 if full else 4.5, 3.5), squeeze=False)
    names, colors = ["rollart", "hand-written loop"], ["tab:green", "tab:gray"]
    sides = ["system", "loop"]
    per = [[r["s_per_step"] for r in rows if r["side"] == side] for side in sides]
    axes[0][0].bar(names, [statistics.median(v) for v in per], color=colors, alpha=0.6)
    for x, v in enumerate(per):
        axes[0][0].plot([x] * len(v), v, "ko", ms=4)
    axes[0][0].set_ylabel("s / training step")
    axes[0][0].set_title(f"quickstart: time per step ({len(per[0])} seeds)")
    if full:
        ax = axes[0][1]
        tt = [[TimeToTarget(r["seconds"], r["budget_s"]) for r in rows if r["side"] == side] for side in sides]
        ax.bar(names, [summarize(v).median for v in tt], color=colors, alpha=0.6)
        for x, v in enumerate(tt):
            ax.scatter([x] * len(v), [t.value for t in v], facecolors=["none" if t.censored else "k" for t in v],
                       edgecolors="k", s=18)
        ax.set_ylabel("s to greedy success >= 0.9 (twice)")
        ax.set_title("quickstart: time to target (aim: rollart <= 2x)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


@exit_on_config_error()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 steps each, 1 seed; compare time per step")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per side (default 3; --quick: 1)")
    ap.add_argument("--seed", type=int, default=0, help="the first seed")
    ap.add_argument("--budget-s", type=float, default=15 * 60.0, help="full run: training seconds per run")
    ap.add_argument("--warmup-steps", type=int, default=default_config().warmup_steps,
                    help="format warm-up of each seed's starting model, shared by both sides and not timed "
                         "(default: the quickstart's, %(default)s; --quick: 10)")
    args = ap.parse_args()
    if args.seeds is None:
        args.seeds = 1 if args.quick else 3
    if args.seeds < 1:
        raise SystemExit(f"--seeds {args.seeds}: need at least 1")
    torch.set_num_threads(2)
    cfg = default_config()
    if args.quick:
        steps, target, budget, every, args.warmup_steps = QUICK_STEPS, None, 60.0, 0, 10
    else:
        steps, target, budget, every = 10_000, cfg.stop_at_success, args.budget_s, cfg.eval_every
    rows = []
    for k in range(args.seeds):
        seed = args.seed + k
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = starting_model(tmp, seed, args.warmup_steps)
            for side in (("system", "loop") if k % 2 == 0 else ("loop", "system")):
                t0 = utc()
                if side == "system":
                    n, seconds, reached, evals = run_system(model_dir, steps, target, budget, every, seed, tmp)
                else:
                    n, seconds, reached, evals = run_loop(model_dir, steps, target, budget, every, seed)
                rows.append(dict(side=side, seed=seed, steps=n, train_s=seconds, s_per_step=seconds / max(n, 1),
                                 seconds=reached.seconds if reached else None, budget_s=budget, evals=evals,
                                 utc_start=t0, load=load_avg()))
                got = ("" if reached is None else f", time to target {reached.seconds:.0f} s" if not reached.censored
                       else f", time to target CENSORED (>= {budget:.0f} s)")
                print(f"[{utc()} UTC, load {load_avg()}] seed {seed} {side:>6}: {n} steps in {seconds:.1f} s "
                      f"({seconds / max(n, 1):.2f} s/step){got}"
                      + (" greedy success by step: " + " ".join(f"{s}:{v:.2f}" for s, v in evals) if evals else ""),
                      flush=True)
    plot(rows, Path(__file__).parent / "plots" / "quickstart.png", full=target is not None)
    by_seed = {r["seed"]: {} for r in rows}
    for r in rows:
        by_seed[r["seed"]][r["side"]] = r["s_per_step"]
    step_ratios = [v["system"] / v["loop"] for v in by_seed.values()]
    for side in ("system", "loop"):
        print(f"{side}: s/step {spread([r['s_per_step'] for r in rows if r['side'] == side])}"
              + ("" if target is None else "; time to target " + format_summary(summarize(
                  [TimeToTarget(r["seconds"], r["budget_s"]) for r in rows if r["side"] == side]))))
    line = (f"system_vs_loop_step={statistics.median(step_ratios):.2f} "
            f"system_vs_loop_step_range={min(step_ratios):.2f}-{max(step_ratios):.2f}")
    if target is not None:
        tt = {side: summarize([TimeToTarget(r["seconds"], r["budget_s"]) for r in rows if r["side"] == side])
              for side in ("system", "loop")}
        ratio, bound = tts_ratio(tt["system"], tt["loop"])  # rollart's median ÷ the loop's (goal <= 2)
        line += (f" system_vs_loop_time_to_target={ratio:.2f} system_vs_loop_time_to_target_bound={bound} "
                 f"system_time_to_target_s={tt['system'].median:.0f} censored=system:{tt['system'].censored}/"
                 f"{tt['system'].runs},loop:{tt['loop'].censored}/{tt['loop'].runs}")
    print(line + f" seeds={args.seeds}")


def utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def load_avg() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


if __name__ == "__main__":
    main()
