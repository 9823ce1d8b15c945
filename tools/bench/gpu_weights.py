"""Weight sync of a whole Qwen3-0.6B-shaped model, trainer -> one inference worker, through the real actor path.

    python tools/bench/gpu_weights.py                      # on a GPU machine (on a CPU one: skipped=no_cuda)
    python tools/bench/gpu_weights.py --device cpu --layers 2   # exercises the same path on a CPU
    python tools/bench/gpu_weights.py --quick              # one version per path instead of --rounds

Model: hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim 128, intermediate 3072, vocab 151936, tied
embeddings, random init, bf16 (~0.6B parameters, ~1.2 GB). A TrainerActor, a WeightStore and one
InferenceWorker run as processes; ``rollart.pipeline.WeightSync`` (the coordinator's code) publishes a new
version and the worker installs it: publish (trainer snapshot -> store, worker pulling) -> prefetch -> update.
Two paths, timed separately, each the median of ``--rounds`` versions:

- ``ipc``: ``weights.cuda_ipc=true``; where trainer and worker share the node and both hold their weights on
  a GPU, the worker opens the trainer's CUDA IPC buckets (device -> device, no host copy);
- ``copy``: ``weights.cuda_ipc=false``; device -> pinned host buckets -> ZeroMQ frames -> pinned -> device,
  bucket by bucket, overlapped.

Whether IPC was really used is read from the worker (``ipc_used``); the worker's weights are checked against
the trainer's (CRC per tensor) after each path. ``measure_weight_sync()`` returns the figures as a dict for
``tools/bench/gpu.py``; standalone the last line is ``weight_sync_s=... weight_sync_ipc_s=...
weight_sync_copy_s=...`` (target weight_sync_s <= 1.0 on a GPU), or ``skipped=no_cuda``.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import statistics
import sys
import tempfile
import time
from rollart.messages import GetStats, WeightsDigest

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = dict(hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=3072, vocab=151936)


def build_model(out: str, layers: int) -> str:
    """A random-init bf16 Qwen3-0.6B-shaped model folder (tokenizer from the tiny-model tool)."""
    import torch

    from rollart.models import CausalLM, ModelConfig, save_model
    from rollart.tools.make_tiny_model import make_tiny_model

    make_tiny_model(out, hidden=64, layers=1, heads=1, kv_heads=1, head_dim=64, intermediate=64, vocab=512)
    tiny = ModelConfig.from_pretrained(out)
    config = dataclasses.replace(tiny, vocab_size=SHAPE["vocab"], hidden_size=SHAPE["hidden"],
                                 intermediate_size=SHAPE["intermediate"], num_hidden_layers=layers,
                                 num_attention_heads=SHAPE["heads"], num_key_value_heads=SHAPE["kv_heads"],
                                 head_dim=SHAPE["head_dim"], tie_word_embeddings=True)
    with torch.device("meta"):
        model = CausalLM(config)
    model.to_empty(device="cpu")
    model.to(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=g)
    model.tie_weights()
    save_model(model, out)
    return out


def _with_device(cls: type, kwargs: dict, device: str) -> tuple[dict, bool]:
    """``kwargs`` plus ``device`` when the config class has that setting (else the component stays on the CPU)."""
    names = {f.name for f in dataclasses.fields(cls)}
    if "device" in names:
        return dict(kwargs, device=device), True
    return kwargs, device == "cpu"


async def _measure(device: str, layers: int, rounds: int, bucket_mb: int) -> dict:
    from rollart.actors import ActorSystem
    from rollart.engine.config import EngineConfig
    from rollart.inference.worker import InferenceWorker
    from rollart.trainer.actor import TrainerActor
    from rollart.weightplane.sync import WeightSync
    from rollart.rollout.proxy import LLMProxy
    from rollart.trainer import TrainerConfig
    from rollart.weightplane.store import WeightStore
    from rollart.weightplane.config import WeightPlaneConfig

    t_start = time.perf_counter()

    def progress(what: str) -> None:  # where the time goes, on stderr (a part that runs out of time shows how far)
        print(f"[weights {time.perf_counter() - t_start:6.1f} s] {what}", file=sys.stderr, flush=True)

    folder = build_model(os.path.join(tempfile.mkdtemp(prefix="gpu_weights_"), "model"), layers)
    progress("model written")
    tkw, trainer_on = _with_device(TrainerConfig, dict(model_path=folder, dtype="bfloat16", num_threads=4), device)
    # the worker decodes nothing here: no CUDA graphs to capture at its start (8 buckets of 28 layers, with the
    # kernels' first compilation on a bare machine), which is start-up time, not weight sync
    ekw, engine_on = _with_device(EngineConfig, dict(model=folder, dtype="bfloat16", num_kv_blocks=8, max_num_seqs=1,
                                                     cuda_graphs=False), device)
    out: dict = {"device": device, "layers": layers}
    if not (trainer_on and engine_on):
        out["note"] = "trainer or engine has no device setting here: their weights stay on the CPU"
    async with ActorSystem(heartbeat_interval=1.0, heartbeat_timeout=300.0, spawn_timeout=900) as system:
        trainer, store, worker = await asyncio.gather(
            system.spawn(TrainerActor, TrainerConfig(**tkw), name="trainer"),
            system.spawn(WeightStore, name="store"),
            system.spawn(InferenceWorker, ekw, name="w0"))
        progress("trainer, store and worker started")
        proxy = LLMProxy([("w0", "cpu", worker)])
        trainer_crc = await trainer.send(WeightsDigest())
        version = 0
        for path, ipc in (("ipc", True), ("copy", False)):
            sync = WeightSync(trainer, store, proxy, bucket_bytes=bucket_mb << 20, config=WeightPlaneConfig(cuda_ipc=ipc))
            times, sources = [], set()
            for _ in range(rounds):
                version += 1
                t0 = time.perf_counter()
                stats = await sync.publish(version)
                await sync.prefetch()
                await sync.update_workers()
                times.append(time.perf_counter() - t0)
                progress(f"{path} path: version {version} in {times[-1]:.2f} s")
                sources |= set((await worker.send(GetStats()))["last_weight_pull"].get("sources", []))
            got = await worker.send(WeightsDigest())
            if any(trainer_crc.get(k) != c for k, c in got.items()):
                raise SystemExit(f"error: after the {path} path the worker does not hold the trainer's weights")
            out[f"weight_sync_{path}_s"] = statistics.median(times)
            out[f"{path}_used_ipc"] = any(s.startswith("ipc:") for s in sources)
            out["model_bytes"] = stats.bytes
    out["ipc_used"] = out["ipc_used_ipc"]
    out["weight_sync_s"] = min(out["weight_sync_ipc_s"], out["weight_sync_copy_s"])
    return out


def measure_weight_sync(device: str = "cuda", layers: int = SHAPE["layers"], rounds: int = 3,
                        bucket_mb: int = 64) -> dict:
    """Figures of both paths (see the module docstring); ``{"skipped": "no_cuda"}`` where no GPU is visible."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        return {"skipped": "no_cuda"}
    return asyncio.run(_measure(device, layers, rounds, bucket_mb))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (exercises the path here)")
    parser.add_argument("--layers", type=int, default=SHAPE["layers"], help="decoder layers (28: the 0.6B shape)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bucket-mb", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="one version per path (--rounds 1)")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 1
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))
    result = measure_weight_sync(args.device, args.layers, args.rounds, args.bucket_mb)
    if "skipped" in result:
        print(f"skipped={result['skipped']}")
        raise SystemExit(0)
    for k, v in result.items():
        print(f"{k}: {v}")
    print(f"weight_sync_s={result['weight_sync_s']:.3f} weight_sync_ipc_s={result['weight_sync_ipc_s']:.3f} "
          f"weight_sync_copy_s={result['weight_sync_copy_s']:.3f} ipc_used={int(result['ipc_used'])}")
