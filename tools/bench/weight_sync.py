"""Weight sync through the real actor path: trainer -> weight store -> 1, 2, 4, 8 inference worker processes.

    python tools/bench/weight_sync.py --quick    # ~26M parameters, one round per size: < 60 s on 2 cores
    python tools/bench/weight_sync.py            # ~104M parameters (Qwen3-style, bf16), three rounds

One run starts a TrainerActor, a WeightStore and 8 InferenceWorker actors (rollart's engine, bf16 weights),
each a process on this machine, then for n = 1, 2, 4, 8 publishes a new version through
``rollart.pipeline.WeightSync`` (the coordinator's code) over the first n workers: publish (trainer -> store,
workers start pulling down the relay chain) -> prefetch -> update_workers (every worker installs it).

Measured, not estimated:
- coordinator bytes: what this process (the coordinator) sent + received over TCP during the sync, from the
  kernel's per-socket counters (``ss -tinp``; ``rollart.weightplane.traffic``), divided by the model's bytes;
- source egress: bytes the weight store (the workers' source) served during the sync, from its own frame
  counter, over the model's bytes (the trainer feeds the store one model as well);
- sync time: wall seconds from publish to the last worker's install.
After the 8-worker sync every worker's weights are checked against the trainer's (CRC per tensor).

LoRA: a model of SmolLM2-135M-Instruct's shape (llama, 30 layers, hidden 576, tied 49152-token embedding;
random weights: only the shapes matter for bytes) syncs to one worker once whole (a full fine-tuning trainer)
and once as a LoRA version (rank 16, alpha 32, q/k/v/o: what ``python -m recipes.grpo_math`` trains): the
bytes the LoRA version moves over the whole model's bytes (``lora_sync_bytes_frac``, target <= 0.02) and both
sync times.

Note: the 8 workers, the store and the trainer share this machine's 2 cores, which also copy every byte; the
relay moves the model 8 times through one memory bus, so ``sync_8_vs_1`` here is bound by the CPU, not by a
network (on a cluster each hop has its own NIC and the chain adds about a bucket of latency per hop).
Writes tools/bench/plots/weight_sync.png. Last line: coordinator_bytes_frac (max over n, target <= 0.01),
source_egress_8 (target <= 2), sync_8_vs_1, sync_1_s, lora_sync_bytes_frac (target <= 0.02), lora_sync_s,
full_sync_s (the SmolLM2-shaped model whole).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from rollart.messages import GetVersion, WeightsDigest

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (1, 2, 4, 8)


def plot(rows: dict, lora: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    ns = list(rows)
    for ax, key, title in zip(axes, ("sync_s", "coordinator_frac", "source_egress"),
                              ("sync time (s)", "coordinator bytes / model bytes", "store egress / model bytes")):
        values = [rows[n][key] for n in ns]
        ax.bar([str(n) for n in ns], values, color="#3a7dc9")
        ax.set_xlabel("inference workers")
        ax.set_title(title, fontsize=9)
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
    ax = axes[3]
    kinds = ("full", "lora")
    ax.bar(["whole model", "LoRA r16"], [lora[k]["bytes"] / 2**20 for k in kinds], color=["#888888", "#3a7dc9"])
    for i, k in enumerate(kinds):
        ax.text(i, lora[k]["bytes"] / 2**20, f"{lora[k]['bytes'] / 2**20:.1f} MiB\n{lora[k]['sync_s']:.2f} s",
                ha="center", va="bottom", fontsize=8)
    ax.set_title(f"SmolLM2-135M shape, 1 worker: bytes per version ({lora['frac']:.2%})", fontsize=9)
    fig.suptitle("weight sync, peer to peer (trainer -> store -> relay chain), processes on one 2-core machine",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


async def main(args: argparse.Namespace) -> dict:
    from rollart.actors import ActorSystem
    from rollart.inference.worker import InferenceWorker
    from rollart.trainer.actor import TrainerActor
    from rollart.weightplane.sync import WeightSync
    from rollart.rollout.proxy import LLMProxy
    from rollart.tools.make_tiny_model import make_tiny_model
    from rollart.trainer import TrainerConfig
    from rollart.weightplane.store import WeightStore
    from rollart.weightplane.config import WeightPlaneConfig
    from rollart.weightplane.traffic import available, tcp_bytes

    if not available():
        raise SystemExit("error: needs `ss` (iproute2) to read the coordinator's TCP counters")
    layers = 3 if args.quick else 12
    rounds = 1 if args.quick else 3
    tmp = tempfile.mkdtemp(prefix="weight_sync_")
    folder = str(make_tiny_model(os.path.join(tmp, "model"), hidden=768, layers=layers, heads=12, kv_heads=4,
                                 head_dim=64, intermediate=3072, vocab=512))
    engine = dict(model=folder, dtype="bfloat16", num_kv_blocks=8, block_size=16)
    async with ActorSystem(heartbeat_interval=1.0, heartbeat_timeout=120.0, spawn_timeout=600) as system:
        t_spawn = time.perf_counter()
        trainer, store, *workers = await asyncio.gather(
            system.spawn(TrainerActor, TrainerConfig(model_path=folder, dtype="bfloat16", num_threads=1),
                         name="trainer"),
            system.spawn(WeightStore, name="store"),
            *(system.spawn(InferenceWorker, engine, name=f"w{i}") for i in range(max(SIZES))))
        print(f"started {2 + len(workers)} actor processes in {time.perf_counter() - t_spawn:.0f} s "
              f"(load average {os.getloadavg()[0]:.1f})", flush=True)
        version, rows = 0, {}
        for n in SIZES:
            proxy = LLMProxy([(f"w{i}", "cpu", workers[i]) for i in range(n)])
            sync = WeightSync(trainer, store, proxy, bucket_bytes=args.bucket_mb << 20, config=WeightPlaneConfig())
            samples = []
            for _ in range(rounds):
                version += 1
                served0 = await store.call("bytes_served")
                c0 = sum(tcp_bytes(os.getpid()))
                t0 = time.perf_counter()
                stats = await sync.publish(version)
                await sync.prefetch()
                await sync.update_workers()
                elapsed = time.perf_counter() - t0
                moved = sum(tcp_bytes(os.getpid())) - c0
                served = await store.call("bytes_served") - served0
                samples.append((elapsed, moved / stats.bytes, served / stats.bytes, stats.bytes))
            rows[n] = dict(sync_s=statistics.median(s[0] for s in samples),
                           coordinator_frac=max(s[1] for s in samples),
                           source_egress=max(s[2] for s in samples), model_bytes=samples[0][3])
            print(f"workers={n}: sync {rows[n]['sync_s']:.2f} s, coordinator bytes/model "
                  f"{rows[n]['coordinator_frac']:.5f}, store egress/model {rows[n]['source_egress']:.2f} "
                  f"(model {samples[0][3] / 2**20:.0f} MiB)", flush=True)
        trainer_crc = await trainer.send(WeightsDigest())
        for i, w in enumerate(workers):
            got = await w.send(WeightsDigest())
            bad = [k for k, c in got.items() if trainer_crc.get(k) != c]
            if bad or await w.send(GetVersion()) != version:
                raise SystemExit(f"error: worker w{i} does not hold the trainer's weights: {bad[:3]}")
        print(f"all {len(workers)} workers hold the trainer's exact weights (version {version})", flush=True)
        rows["lora"] = await lora_vs_full(system, tmp, args.bucket_mb << 20)
    return rows


def smollm2_shaped(folder: str) -> str:
    """A random model of SmolLM2-135M-Instruct's shape (the tiny tokenizer: bytes depend on shapes only)."""
    import dataclasses
    import torch
    from rollart.models import CausalLM, ModelConfig, save_model
    from rollart.tools.make_tiny_model import make_tiny_model
    make_tiny_model(folder, arch="llama", hidden=64, layers=1, heads=1, kv_heads=1, head_dim=64, intermediate=64)
    config = dataclasses.replace(ModelConfig.from_pretrained(folder), vocab_size=49152, hidden_size=576,
                                 intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                                 num_key_value_heads=3, head_dim=64, tie_word_embeddings=True)
    model = CausalLM(config)
    model.init_weights(torch.Generator().manual_seed(0), std=0.02)
    save_model(model.to(torch.bfloat16), folder)
    return folder


async def lora_vs_full(system, tmp: str, bucket_bytes: int) -> dict:
    """One sync of the SmolLM2-shaped model whole, then one LoRA version (rank 16), to one worker."""
    from rollart.inference.worker import InferenceWorker
    from rollart.models.lora import LoraConfig
    from rollart.rollout.proxy import LLMProxy
    from rollart.trainer import TrainerConfig
    from rollart.trainer.actor import TrainerActor
    from rollart.weightplane.config import WeightPlaneConfig
    from rollart.weightplane.store import WeightStore
    from rollart.weightplane.sync import WeightSync

    folder = smollm2_shaped(os.path.join(tmp, "smollm2_shape"))
    lora = LoraConfig(rank=16, alpha=32)
    base = dict(model_path=folder, dtype="bfloat16", num_threads=1)
    full, adapted, store, worker = await asyncio.gather(
        system.spawn(TrainerActor, TrainerConfig(**base), name="full"),
        system.spawn(TrainerActor, TrainerConfig(**base, lora=lora), name="lora"),
        system.spawn(WeightStore, name="store-lora"),
        system.spawn(InferenceWorker, dict(model=folder, dtype="bfloat16", num_kv_blocks=8, block_size=16,
                                           lora=lora), name="wl"))
    proxy = LLMProxy([("wl", "cpu", worker)])
    out = {}
    for version, (kind, trainer) in enumerate((("full", full), ("lora", adapted)), start=1):
        sync = WeightSync(trainer, store, proxy, bucket_bytes=bucket_bytes, config=WeightPlaneConfig())
        t0 = time.perf_counter()
        stats = await sync.publish(version)
        await sync.prefetch()
        await sync.update_workers()
        out[kind] = dict(sync_s=time.perf_counter() - t0, bytes=stats.bytes)
    out["frac"] = out["lora"]["bytes"] / out["full"]["bytes"]
    print(f"SmolLM2-135M shape: whole {out['full']['bytes'] / 2**20:.1f} MiB in {out['full']['sync_s']:.2f} s; "
          f"LoRA rank {lora.rank} {out['lora']['bytes'] / 2**20:.2f} MiB in {out['lora']['sync_s']:.2f} s "
          f"({out['frac']:.4f} of the bytes)", flush=True)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~26M parameters, one round per size (< 60 s)")
    parser.add_argument("--bucket-mb", type=int, default=8, help="bucket size in MiB")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))
    t_start = time.perf_counter()
    rows = asyncio.run(main(args))
    os.makedirs(os.path.join(HERE, "plots"), exist_ok=True)
    lora = rows.pop("lora")
    plot(rows, lora, os.path.join(HERE, "plots", "weight_sync.png"))
    print(f"wall {time.perf_counter() - t_start:.0f} s; params {rows[1]['model_bytes'] / 2 / 1e6:.0f}M (bf16)")
    print(f"coordinator_bytes_frac={max(r['coordinator_frac'] for r in rows.values()):.4f} "
          f"source_egress_8={rows[8]['source_egress']:.2f} sync_8_vs_1={rows[8]['sync_s'] / rows[1]['sync_s']:.2f} "
          f"sync_1_s={rows[1]['sync_s']:.2f} lora_sync_bytes_frac={lora['frac']:.4f} "
          f"lora_sync_s={lora['lora']['sync_s']:.2f} full_sync_s={lora['full']['sync_s']:.2f}")
