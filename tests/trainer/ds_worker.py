"""Subprocess used by test_deepspeed.py: train the same batches with the torch backend and with DeepSpeed
ZeRO stages, write the resulting weights (and a checkpoint round-trip check) to OUT_DIR.

    python ds_worker.py OUT_DIR RANK WORLD PORT STAGE[,STAGE...] [DEVICE [DTYPE]]   (default: cpu float32)
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_policy import make_model, make_trajectories  # noqa: E402

from rollart.trainer import TrainerConfig, make_trainer  # noqa: E402
from rollart.trainer.shutdown import exit_process  # noqa: E402

DS_CONFIG = dict(num_threads=1, lr=1e-2, micro_batch_tokens=48, num_minibatches=2, kl_coef=0.05, grad_clip=1.0)
SEEDS = (20, 21)


def snapshot(trainer):
    """A copy of the weights (named_tensors may alias live parameters; gathered under ZeRO-3)."""
    return [(n, t.clone()) for n, t in trainer.named_tensors()]


def main() -> None:
    out, rank, world, port = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    stages = [int(s) for s in sys.argv[5].split(",")]
    device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
    dtype = sys.argv[7] if len(sys.argv) > 7 else "float32"
    report = {}
    for stage in stages:
        cfg = TrainerConfig(backend="deepspeed", zero_stage=stage, world_size=world, rank=rank,
                            master_port=port, device=device, dtype=dtype, **DS_CONFIG)
        trainer = make_trainer(cfg, model=make_model(0))
        metrics = [trainer.train_step(make_trajectories(3, 4, seed=s)) for s in SEEDS]
        named = snapshot(trainer)
        ckpt_root = out / f"ckpt_stage{stage}"
        trainer.save_checkpoint(str(ckpt_root), extra={"data_position": len(SEEDS)})
        next_metrics = trainer.train_step(make_trajectories(3, 4, seed=22))
        after_next = dict(snapshot(trainer))
        extra = trainer.load_checkpoint(str(ckpt_root))  # back to the state before the third step
        restored = dict(snapshot(trainer))
        redo = trainer.train_step(make_trajectories(3, 4, seed=22))
        redone = dict(snapshot(trainer))
        if rank == 0:
            torch.save(dict(named), out / f"stage{stage}.pt")
            report[stage] = {
                "metrics": metrics, "version_after_load": trainer.version - 1, "extra": extra,
                "restore_matches": all(torch.allclose(restored[n], t) for n, t in named),
                "redo_matches": all(torch.allclose(redone[n], after_next[n], atol=1e-6) for n in redone),
                "third_step_changed": any(not torch.equal(after_next[n], t) for n, t in named),
                "redo_loss": [next_metrics["losses/policy"], redo["losses/policy"]],
            }
    if rank == 0:
        (out / f"report_{'_'.join(map(str, stages))}.json").write_text(json.dumps(report))
    trainer.close()


if __name__ == "__main__":
    main()
    exit_process(0)  # as actor processes end: DeepSpeed's gloo threads outlive close(), see rollart.trainer.shutdown
