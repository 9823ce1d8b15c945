"""Subprocess used by test_checkpoint.py: train a tiny policy, checkpoint after every step, optionally
resume from the latest checkpoint, optionally hang inside one save so the test can kill -9 it there.

    python ckpt_worker.py ROOT LOG TOTAL_STEPS [resume] [hang_at=VERSION]
"""
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_policy import make_model, make_trajectories  # noqa: E402

from rollart.trainer import TrainerConfig, checkpoint  # noqa: E402
from rollart.trainer.torch_trainer import TorchTrainer  # noqa: E402


def main() -> None:
    root, log_path, total = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    opts = sys.argv[4:]
    hang_at = next((int(o.split("=")[1]) for o in opts if o.startswith("hang_at=")), None)
    trainer = TorchTrainer(TrainerConfig(num_threads=1, lr=1e-2, seed=0), model=make_model(0))
    data_position = 0
    if "resume" in opts:
        extra = trainer.load_checkpoint(root)
        data_position = extra["data_position"]
    real_fsync = checkpoint._fsync_tree

    def fsync_or_hang(folder):
        if trainer.version == hang_at:
            (Path(root) / "HANGING").write_text(str(folder))
            time.sleep(600)  # the test kills us here: model/optimizer written, not yet renamed
        real_fsync(folder)

    checkpoint._fsync_tree = fsync_or_hang
    while trainer.version < total:
        trainer.train_step(make_trajectories(seed=data_position))
        data_position += 1
        draws = [random.random(), float(np.random.rand()), float(torch.rand(()))]
        trainer.save_checkpoint(root, extra={"data_position": data_position,
                                             "buffer": {"pending": data_position * 2}})
        with open(log_path, "a") as f:
            f.write(json.dumps({"version": trainer.version, "data_position": data_position, "draws": draws}) + "\n")


if __name__ == "__main__":
    main()
