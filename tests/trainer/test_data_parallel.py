"""Covers data parallelism of the torch trainer over 2 real gloo processes: same update as 1 process on
the same batch (weights and logged losses), and a 2-rank checkpoint with per-rank RNG files."""
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rollart.trainer import TrainerConfig, checkpoint
from rollart.trainer.torch_trainer import TorchTrainer

from dp_worker import DP_CONFIG
from tiny_policy import make_model, make_trajectories

WORKER = Path(__file__).with_name("dp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_match_one_process(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), "2", str(port), str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]
    try:
        for p in procs:
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, err.decode()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()

    single = TorchTrainer(TrainerConfig(**DP_CONFIG), model=make_model(seed=0))
    metrics = [single.train_step(make_trajectories(3, 4, seed=s)) for s in (10, 11)]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for name, expected in single.policy.state_dict().items():
        for r in ranks:
            assert torch.allclose(r["params"][name], expected, atol=1e-5, rtol=1e-4), name
    assert torch.equal(ranks[0]["params"]["model.embed_tokens.weight"], ranks[1]["params"]["model.embed_tokens.weight"])
    for key in ("losses/policy", "losses/kl", "losses/entropy", "losses/grad_norm", "charts/loss_tokens"):
        for step in range(2):
            assert ranks[0]["metrics"][step][key] == pytest.approx(metrics[step][key], rel=1e-4, abs=1e-6), key
            assert ranks[1]["metrics"][step][key] == pytest.approx(metrics[step][key], rel=1e-4, abs=1e-6), key

    folder = checkpoint.latest(tmp_path / "ckpt")
    assert folder.name == "step_00000002"
    assert (folder / "rng_rank0.pt").exists() and (folder / "rng_rank1.pt").exists()
    restored = TorchTrainer(TrainerConfig(**DP_CONFIG), model=make_model(seed=3))
    assert restored.load_checkpoint(str(tmp_path / "ckpt")) == {"data_position": 2}
    for name, expected in single.policy.state_dict().items():
        assert torch.allclose(restored.policy.state_dict()[name], expected, atol=1e-5, rtol=1e-4), name
