"""The quickstart's overhead: rollart's full pipeline vs a hand-written single-process GRPO loop.

    python tools/bench/quickstart.py --quick     # a few steps of each: time per training step
    python tools/bench/quickstart.py             # each until greedy success >= 0.9 (or 15 min): time to target

Both train the same tiny model (built by make_tiny_model, same seed) on the same FrozenLake task with the
same chat format, batch (groups x group size), reward, optimiser and learning rate. The hand-written loop
is what one writes without a framework: one process, batched full-recompute forward per turn (no KV
cache, no actors), a plain GRPO policy-gradient step. rollart runs its actors, engine, buffer and trainer.
Last line: ``system_vs_loop_step=<rollart s/step ÷ loop s/step>`` (and, without --quick,
``system_vs_loop_time_to_target=``); the goal is <= 2.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import envs  # noqa: E402,F401
from recipes.grpo_frozenlake import TASK, default_config  # noqa: E402
from rollart.models import load_model, load_tokenizer  # noqa: E402
from rollart.pipeline import Coordinator  # noqa: E402
from rollart.rollout.chat import ChatFormat  # noqa: E402
from rollart.tools.make_tiny_model import make_tiny_model  # noqa: E402
from rollart.trainer.losses import group_advantages, token_logprobs  # noqa: E402


# ---------------------------------------------------------------------------- the hand-written loop
def play(model, chat: ChatFormat, groups: int, group_size: int, max_turns: int, rng: random.Random,
         greedy: bool = False):
    """Play groups x group_size episodes; returns (token ids, model-token masks, rewards, successes, group ids)."""
    n = groups * group_size
    seeds = [rng.randrange(2**31) for _ in range(groups)]
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


def train_step(model, opt, seqs, masks, rewards, group_ids, grad_clip: float) -> None:
    adv = group_advantages(rewards, [str(g) for g in group_ids], eps=1e-4)  # (N,)
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width)
    for r, (s, m) in enumerate(zip(seqs, masks)):
        ids[r, :len(s)], mask[r, :len(m)] = torch.tensor(s), torch.tensor(m, dtype=torch.float)
    logp = token_logprobs(model(ids), ids)  # (N, T)
    loss = -(adv[:, None] * logp * mask).sum() / mask.sum()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()


def run_loop(model_dir: str, steps: int, target: float | None, budget_s: float, eval_every: int, seed: int):
    torch.manual_seed(seed)
    cfg = default_config()
    model = load_model(model_dir)
    chat = ChatFormat(load_tokenizer(model_dir), gym.make(TASK.env_id).unwrapped.system_prompt)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.trainer.lr)
    rng = random.Random(seed)
    t0 = time.perf_counter()
    step = 0
    reached = None
    while step < steps and time.perf_counter() - t0 < budget_s:
        seqs, masks, rewards, _, groups = play(model, chat, cfg.batch_groups, cfg.rollout.group_size, TASK.max_turns,
                                                 rng)
        train_step(model, opt, seqs, masks, rewards, groups, cfg.trainer.grad_clip)
        step += 1
        if target is not None and step % eval_every == 0:
            _, _, _, ok, _ = play(model, chat, 1, 4, TASK.max_turns, rng, greedy=True)
            if sum(ok) / len(ok) >= target:
                reached = time.perf_counter() - t0
                break
    return step, time.perf_counter() - t0, reached


# ---------------------------------------------------------------------------- rollart
def run_system(model_dir: str, steps: int, target: float | None, budget_s: float, eval_every: int, seed: int,
               logdir: str):
    cfg = dataclasses.replace(default_config(), model=model_dir, total_steps=steps, seed=seed, logdir=logdir,
                              eval_every=eval_every if target else 0, stop_at_success=target,
                              time_limit_s=budget_s, quiet=True, checkpoint_every=0)
    t0 = time.perf_counter()
    result = asyncio.run(Coordinator(cfg, [TASK]).run())
    elapsed = result.history[-1]["system/elapsed_s"] if result.history else time.perf_counter() - t0
    reached = None
    for step, success in result.evals:
        if target is not None and success["FrozenLake"] >= target:
            reached = next(h["system/elapsed_s"] for h in result.history if h["step"] == step)
            break
    return result.steps, elapsed, reached


def plot(s_per: float, l_per: float, s_reach: float | None, l_reach: float | None, path: Path) -> None:
    """Seconds per step, and (full run) seconds to greedy success >= 0.9, of rollart and the hand-written loop."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    full = s_reach is not None or l_reach is not None
    fig, axes = plt.subplots(1, 2 if full else 1, figsize=(9 if full else 4.5, 3.5), squeeze=False)
    names, colors = ["rollart", "hand-written loop"], ["tab:green", "tab:gray"]
    axes[0][0].bar(names, [s_per, l_per], color=colors)
    axes[0][0].set_ylabel("s / training step")
    axes[0][0].set_title("quickstart: time per step")
    if full:
        axes[0][1].bar(names, [s_reach or 0.0, l_reach or 0.0], color=colors)
        axes[0][1].set_ylabel("s to greedy success >= 0.9")
        axes[0][1].set_title("quickstart: time to target (aim: rollart <= 2x)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few steps each; compare time per step")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(Path(tmp) / "tiny")
        make_tiny_model(model_dir, seed=args.seed)
        if args.quick:
            steps, target, budget, every = 4, None, 60.0, 0
        else:
            steps, target, budget, every = 10_000, 0.9, 15 * 60.0, 5
        # the system's first step includes actor start-up; run one warm step count more and drop it
        s_steps, s_time, s_reach = run_system(model_dir, steps, target, budget, every, args.seed, tmp)
        l_steps, l_time, l_reach = run_loop(model_dir, steps, target, budget, every, args.seed)
    s_per, l_per = s_time / max(s_steps, 1), l_time / max(l_steps, 1)
    print(f"rollart: {s_steps} steps in {s_time:.1f} s ({s_per:.2f} s/step), reached target at {s_reach}")
    print(f"hand-written loop: {l_steps} steps in {l_time:.1f} s ({l_per:.2f} s/step), reached target at {l_reach}")
    plot(s_per, l_per, s_reach, l_reach, Path(__file__).parent / "plots" / "quickstart.png")
    line = f"system_vs_loop_step={s_per / l_per:.2f}"
    if not args.quick:
        ratio = (s_reach / l_reach) if (s_reach and l_reach) else float("nan")
        line += f" system_vs_loop_time_to_target={ratio:.2f} system_time_to_target_s={s_reach or float('nan'):.0f}"
    print(line)


if __name__ == "__main__":
    main()
