"""Subprocess used by test_data_parallel.py: one data-parallel rank of the torch trainer over gloo.

    python dp_worker.py RANK WORLD PORT OUT_DIR
Trains 2 steps on fixed batches, writes its final weights to OUT_DIR/rank{RANK}.pt and a checkpoint.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_policy import make_model, make_trajectories  # noqa: E402

from rollart.trainer import TrainerConfig  # noqa: E402
from rollart.trainer.torch_trainer import TorchTrainer  # noqa: E402

DP_CONFIG = dict(num_threads=1, lr=1e-2, micro_batch_tokens=48, num_minibatches=2, kl_coef=0.05,
                 entropy_coef=0.01)


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    cfg = TrainerConfig(world_size=world, rank=rank, master_port=port, **DP_CONFIG)
    # different init per rank on purpose: rank 0's weights must be broadcast to everyone
    trainer = TorchTrainer(cfg, model=make_model(seed=rank))
    metrics = [trainer.train_step(make_trajectories(3, 4, seed=s)) for s in (10, 11)]
    torch.save({"params": trainer.policy.state_dict(), "metrics": metrics}, out / f"rank{rank}.pt")
    trainer.save_checkpoint(str(out / "ckpt"), extra={"data_position": 2})
    trainer.close()


if __name__ == "__main__":
    main()
