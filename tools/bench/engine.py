"""Engine benchmark: rollart's torch engine vs HF transformers `generate` on a multi-turn agent workload.

    python tools/bench/engine.py --quick     # tiny model (made on the fly), < 60 s on 2 cores
    python tools/bench/engine.py             # tiny model with more turns, plus SmolLM2-135M if cached
                                             # (python -m rollart.tools.get_smollm2 caches it)

Workload (the same for both, deterministic): T trajectories (16) of a FrozenLake-style chat agent,
each starting from a system + task prompt of mixed length (one to six paragraphs of instructions and a
grid, ~60-400 tokens) and running several turns. Each turn the model generates a mixed number of
tokens (8-48, drawn per trajectory and turn; EOS ignored so both engines produce exactly that many)
at temperature 1; then an observation (next grid, position, reward) is appended as chat-template
tokens and the next turn starts from the whole history.

* ours: one LLMEngine, trajectory-level — a trajectory's next turn is submitted the moment its
  previous generation finishes (continuous batching); histories are reused from the prefix cache.
* HF: each turn, all trajectories' full histories are left-padded into one batch and passed to
  `model.generate(max_new_tokens = the longest request of the turn)`; each trajectory keeps its own
  requested number of tokens (HF cannot stop one row early without an EOS).

Figures (both engines single-threaded, --threads 1, in one process, one after the other):
`engine_vs_hf` = HF's CPU seconds / ours for the same kept tokens, i.e. the ratio of tokens per
core-second. Single-threaded and I/O-free, a run's CPU time is its wall time on a dedicated core; on a
shared, oversubscribed machine the wall clock mostly measures what the other tenants did, so the
wall-clock ratio is printed as `engine_vs_hf_wall` but not used as the headline. `engine_vs_hf_raw`
counts every token HF generated, kept or not (HF cannot stop one row early: its raw decode rate).
`prefix_hit` = prompt tokens served from the prefix cache / reusable tokens, where a turn's reusable
tokens are its whole previous context (previous prompt + previous output), summed over turns >= 2. It is
measured in further runs of our engine on the same workload whose KV cache holds only a fraction of the
working set (every trajectory's final context, in blocks), so histories compete for the cache: running
sequences are preempted and cached histories evicted (`kv_evictions` counts the cached blocks dropped,
`kv_preemptions` the preemptions). The judged `prefix_hit` is at 0.5 of the working set; 0.4 and 0.3 are
printed beside it (`prefix_hit_kv040`, `prefix_hit_kv030`) to show where it breaks. It fails (< 0.9) when
the engine's eviction order drops the histories that the next turns need (e.g. evicting a waiting
trajectory's head blocks before stale tails), or preempts too eagerly.
`prefix_hit_unbounded` is the engine_vs_hf run's, with room for every context twice over.
Without --quick, SmolLM2 runs 8 trajectories x 3 turns (its CPU cost).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from rollart.engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from rollart.types import GenerateRequest  # noqa: E402
from rollart.models import load_tokenizer  # noqa: E402

INSTRUCTIONS = [
    "You are an agent playing FrozenLake. Reach the goal G without falling into a hole H.",
    "S is the start, F is frozen ice, H is a hole and G is the goal. P marks where you are.",
    "Each turn, think briefly, then answer with one action: L (Left), D (Down), R (Right) or U (Up).",
    "An invalid answer wastes the turn. The episode ends at the goal, in a hole, or after 12 turns.",
    "Plan a path that avoids every hole; moving into a wall leaves you where you are.",
    "Be concise: a short plan, then the action letter on its own line.",
]


def _grid(rng: random.Random) -> str:
    rows = [[rng.choice("FFFH") for _ in range(4)] for _ in range(4)]
    rows[0][0], rows[3][3] = "S", "G"
    r, c = rng.randrange(4), rng.randrange(4)
    rows[r][c] = "P"
    return "\n".join("".join(x) for x in rows) + f"\nYou are at r{r}c{c}."


@dataclass
class Trajectory:
    prompt: list[int]
    gen_lens: list[int]
    turn: int = 0
    context: list[int] = field(default_factory=list)


def make_workload(tok, n_traj: int, n_turns: int, seed: int):
    """Initial prompts, per-turn generation lengths and per-turn observation tokens (fixed in advance)."""
    rng = random.Random(seed)
    trajs, observations = [], []
    for _ in range(n_traj):
        paragraphs = " ".join(INSTRUCTIONS[: rng.randint(1, 6)]) * rng.randint(1, 2)
        msgs = [{"role": "system", "content": paragraphs}, {"role": "user", "content": _grid(rng)}]
        prompt = list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)["input_ids"])
        trajs.append(Trajectory(prompt, [rng.randint(8, 48) for _ in range(n_turns)]))
        obs = []
        for _ in range(n_turns - 1):
            text = f"<|im_end|>\n<|im_start|>user\n{_grid(rng)} Reward 0.<|im_end|>\n<|im_start|>assistant\n"
            obs.append(tok.encode(text, add_special_tokens=False))
        observations.append(obs)
    return trajs, observations


KV_BUDGET_FRACS = (0.5, 0.4, 0.3)
"""prefix_hit's KV caches, as fractions of the working set (every trajectory's final context, in blocks);
the first is the judged one."""


def working_set_blocks(trajs, observations, block_size: int = 16) -> int:
    """KV blocks that would hold every trajectory's final context (prompt, every output, every observation)."""
    return sum(-(-(len(t.prompt) + sum(t.gen_lens) + sum(map(len, o))) // block_size)
               for t, o in zip(trajs, observations))


def run_engine(path, trajs, observations, seed: int, kv_blocks: int | None = None) -> dict:
    # KV cache: room for every trajectory's final context twice over (running + prefix-cached history)
    final = sum(len(t.prompt) + sum(t.gen_lens) + sum(map(len, o)) for t, o in zip(trajs, observations))
    kv_blocks = kv_blocks or 2 * (final // 16 + len(trajs))
    engine = LLMEngine(EngineConfig(model=str(path), max_num_seqs=64, seed=seed, num_kv_blocks=kv_blocks))
    contexts = [list(t.prompt) for t in trajs]
    turns = [0] * len(trajs)
    kept = hit = reusable = 0
    prev_len = [0] * len(trajs)

    def submit(i):
        sp = SamplingParams(temperature=1.0, max_tokens=trajs[i].gen_lens[turns[i]], ignore_eos=True, seed=seed * 1000 + i)
        engine.add_request(GenerateRequest(f"t{i}-{turns[i]}", contexts[i], sp))

    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(len(trajs)):
        submit(i)
    while engine.has_unfinished_requests():
        for out in engine.step():
            i = int(out.request_id[1:].split("-")[0])
            kept += len(out.token_ids)
            if turns[i] > 0:
                hit += out.num_cached_tokens
                reusable += prev_len[i]
            prev_len[i] = len(contexts[i]) + len(out.token_ids)
            if turns[i] + 1 < len(trajs[i].gen_lens):
                contexts[i] = contexts[i] + out.token_ids + observations[i][turns[i]]
                turns[i] += 1
                submit(i)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"tokens": kept, "seconds": dt, "tok_s": kept / dt, "cpu_s": cpu, "prefix_hit": hit / max(reusable, 1),
            "preemptions": engine.stats().preemptions, "steps": engine.stats().steps,
            "kv_blocks": kv_blocks, "evictions": engine.scheduler.bm.evictions}


def run_hf(path, trajs, observations, seed: int) -> dict:
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    torch.manual_seed(seed)
    contexts = [list(t.prompt) for t in trajs]
    pad = 0
    kept = generated = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for turn in range(len(trajs[0].gen_lens)):
        want = [t.gen_lens[turn] for t in trajs]
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)               # (B, L) left-padded
        mask = torch.zeros_like(ids)
        for r, c in enumerate(contexts):
            ids[r, width - len(c):] = torch.tensor(c)
            mask[r, width - len(c):] = 1
        n = max(want)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                 do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad)
        new = out[:, width:]                                                           # (B, n)
        generated += new.numel()
        for r in range(len(contexts)):
            toks = new[r, :want[r]].tolist()
            kept += len(toks)
            contexts[r] = contexts[r] + toks + (observations[r][turn] if turn < len(observations[r]) else [])
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"tokens": kept, "generated": generated, "seconds": dt, "tok_s": kept / dt, "raw_tok_s": generated / dt,
            "cpu_s": cpu}


def bench_model(name, path, n_traj, n_turns, seed) -> dict:
    tok = load_tokenizer(path)
    trajs, observations = make_workload(tok, n_traj, n_turns, seed)
    ours = run_engine(path, trajs, observations, seed)
    hf = run_hf(path, trajs, observations, seed)
    assert ours["tokens"] == hf["tokens"]
    res = {"model": name, "ours": ours, "hf": hf, "ratio": hf["cpu_s"] / ours["cpu_s"],
           "ratio_wall": ours["tok_s"] / hf["tok_s"],
           "ratio_raw": hf["cpu_s"] / ours["cpu_s"] * hf["tokens"] / hf["generated"],
           "prompt_lens": [len(t.prompt) for t in trajs]}
    print(f"[{name}] {n_traj} trajectories x {n_turns} turns, prompts {min(res['prompt_lens'])}-{max(res['prompt_lens'])} tokens, "
          f"{ours['tokens']} generated tokens each\n"
          f"  ours: {ours['cpu_s']:.2f} CPU s ({ours['tokens'] / ours['cpu_s']:.0f} tok per CPU s), wall {ours['seconds']:.2f} s  "
          f"prefix_hit={ours['prefix_hit']:.3f} steps={ours['steps']} preemptions={ours['preemptions']}\n"
          f"  HF generate: {hf['cpu_s']:.2f} CPU s ({hf['tokens'] / hf['cpu_s']:.0f} kept, "
          f"{hf['generated'] / hf['cpu_s']:.0f} raw tok per CPU s), wall {hf['seconds']:.2f} s\n"
          f"  engine_vs_hf={res['ratio']:.2f}  engine_vs_hf_raw={res['ratio_raw']:.2f}  "
          f"engine_vs_hf_wall={res['ratio_wall']:.2f}", flush=True)
    return res


def bench_prefix_hit(path, n_traj: int, n_turns: int, seed: int) -> list[dict]:
    """Our engine alone on the engine_vs_hf workload, once per KV budget in KV_BUDGET_FRACS."""
    tok = load_tokenizer(path)
    trajs, observations = make_workload(tok, n_traj, n_turns, seed)
    need = working_set_blocks(trajs, observations)
    out = []
    for frac in KV_BUDGET_FRACS:
        res = run_engine(path, trajs, observations, seed, kv_blocks=max(1, int(frac * need)))
        res.update(working_set_blocks=need, frac=frac)
        out.append(res)
        print(f"  prefix cache under a KV budget of {res['kv_blocks']} blocks = {frac:.2f} x the working set "
              f"({need} blocks): prefix_hit={res['prefix_hit']:.3f} evictions={res['evictions']} "
              f"preemptions={res['preemptions']} ({res['cpu_s']:.2f} CPU s)", flush=True)
    return out


def plot(results, out: Path, budgets: list[dict] = ()) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = [r["model"] for r in results]
    x = range(len(results))
    bars = [("tokens per CPU s (headline)", "ratio"), ("vs HF raw tokens per CPU s", "ratio_raw"),
            ("wall clock (shared machine)", "ratio_wall")]
    for k, (label, key) in enumerate(bars):
        xs = [i + (k - 1) * 0.27 for i in x]
        axes[0].bar(xs, [r[key] for r in results], 0.27, label=label)
        for xi, r in zip(xs, results):
            axes[0].text(xi, r[key], f"{r[key]:.1f}", ha="center", va="bottom", fontsize=8)
    axes[0].axhline(3.0, ls="--", color="gray", label="goal 3x")
    axes[0].set_xticks(list(x), names)
    axes[0].set_ylabel("rollart engine / HF generate (measured)")
    axes[0].set_title("multi-turn agent workload, same tokens")
    axes[0].legend(fontsize=8)
    hit_names = [f"{n}\nKV 2x contexts" for n in names]
    axes[1].bar(hit_names, [r["ours"]["prefix_hit"] for r in results], color="tab:green")
    for b in budgets:
        axes[1].bar([f"KV {b['frac']:.1f}x\nworking set\n{b['evictions']} evict."], [b["prefix_hit"]],
                    color="tab:olive" if b is budgets[0] else "tab:gray")
    axes[1].axhline(0.9, ls="--", color="gray", label="goal 0.9")
    axes[1].set_ylim(0, 1)
    axes[1].set_title("prefix-cache hit / reusable tokens (turns >= 2)")
    axes[1].legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny model, 4 turns (< 60 s)")
    p.add_argument("--trajectories", type=int, default=16)
    p.add_argument("--turns", type=int, default=None, help="turns per trajectory (default 4 quick, 6 full)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both engines")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smollm2-trajectories", type=int, default=8, help="trajectories (x 3 turns) for SmolLM2")
    p.add_argument("--smollm2", default=os.path.expanduser("~/.cache/rollart/smollm2-135m-instruct"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    turns = a.turns or (4 if a.quick else 6)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        from rollart.tools.make_tiny_model import make_tiny_model
        tiny = make_tiny_model(Path(tmp) / "tiny", seed=a.seed)
        results.append(bench_model("tiny-0.9M", tiny, a.trajectories, turns, a.seed))
        budgets = bench_prefix_hit(tiny, a.trajectories, turns, a.seed)
        budget = budgets[0]
    if not a.quick:
        if (Path(a.smollm2) / "config.json").is_file():
            results.append(bench_model("SmolLM2-135M", a.smollm2, a.smollm2_trajectories, 3, a.seed))
        else:
            print(f"SmolLM2 not cached at {a.smollm2}: run `python -m rollart.tools.get_smollm2` to include it", file=sys.stderr)
    plot(results, Path(__file__).parent / "plots" / "engine.png", budgets)
    head = results[0]
    extra = "".join(f" engine_vs_hf_smollm2={r['ratio']:.2f} prefix_hit_smollm2={r['ours']['prefix_hit']:.3f}"
                    for r in results[1:])
    ours, hf = head["ours"], head["hf"]
    print(f"engine_vs_hf={head['ratio']:.2f} engine_vs_hf_raw={head['ratio_raw']:.2f} "
          f"engine_vs_hf_wall={head['ratio_wall']:.2f} prefix_hit={budget['prefix_hit']:.3f} "
          f"kv_budget_frac={budget['kv_blocks'] / budget['working_set_blocks']:.2f} "
          f"kv_evictions={budget['evictions']} kv_preemptions={budget['preemptions']} "
          + "".join(f"prefix_hit_kv{round(b['frac'] * 100):03d}={b['prefix_hit']:.3f} " for b in budgets[1:])
          + f"prefix_hit_unbounded={ours['prefix_hit']:.3f} "
          f"engine_tok_per_cpu_s={ours['tokens'] / ours['cpu_s']:.0f} hf_tok_per_cpu_s={hf['tokens'] / hf['cpu_s']:.0f}" + extra)


if __name__ == "__main__":
    main()
