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

Note: the 8 workers, the store and the trainer share this machine's 2 cores, which also copy every byte; the
relay moves the model 8 times through one memory bus, so ``sync_8_vs_1`` here is bound by the CPU, not by a
network (on a cluster each hop has its own NIC and the chain adds about a bucket of latency per hop).
Writes tools/bench/plots/weight_sync.png. Last line: coordinator_bytes_frac (max over n, target <= 0.01),
source_egress_8 (target <= 2), sync_8_vs_1, sync_1_s.
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


def plot(rows: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    ns = list(rows)
    for ax, key, title in zip(axes, ("sync_s", "coordinator_frac", "source_egress"),
                              ("sync time (s)", "coordinator bytes / model bytes", "store egress / model bytes")):
        values = [rows[n][key] for n in ns]
        ax.bar([str(n) for n in ns], values, color="#3a7dc9")
        ax.set_xlabel("inference workers")
        ax.set_title(title, fontsize=9)
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
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
    return rows


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
    plot(rows, os.path.join(HERE, "plots", "weight_sync.png"))
    print(f"wall {time.perf_counter() - t_start:.0f} s; params {rows[1]['model_bytes'] / 2 / 1e6:.0f}M (bf16)")
    print(f"coordinator_bytes_frac={max(r['coordinator_frac'] for r in rows.values()):.4f} "
          f"source_egress_8={rows[8]['source_egress']:.2f} sync_8_vs_1={rows[8]['sync_s'] / rows[1]['sync_s']:.2f} "
          f"sync_1_s={rows[1]['sync_s']:.2f}")
