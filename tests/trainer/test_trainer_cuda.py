"""Covers the trainer on a CUDA GPU (marked cuda; skipped, saying so, where none is visible): its losses and
gradients match the CPU fp32 path within stated tolerances, and every tensor lives on the GPU; DeepSpeed
ZeRO 0-3 on CUDA (batches on the model's device) match the torch backend there."""
import importlib.util
import os

import pytest
import torch

from rollart.trainer import TrainerConfig
from rollart.trainer.torch_trainer import TorchTrainer

from tiny_policy import make_model, make_trajectories

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")]

FP32_LOSS_TOL = 1e-4
"""CUDA fp32 vs CPU fp32: |loss difference| (different kernels, same math)."""
BF16_LOSS_TOL = 5e-3
"""CUDA bf16 autocast vs CPU fp32 (the CPU's own bf16 path differs by ~6e-4 on this model)."""
DS_BF16_TOL = 2e-3
"""DeepSpeed bf16 on CUDA vs DeepSpeed bf16 on the CPU: |first loss difference| (3e-4 measured on an H200)."""


def _trainer(device: str, dtype: str, **kw) -> TorchTrainer:
    cfg = TrainerConfig(device=device, dtype=dtype, num_threads=1, kl_coef=0.05, entropy_coef=0.01, **kw)
    return TorchTrainer(cfg, model=make_model(0))


def _grads(tr: TorchTrainer) -> torch.Tensor:
    return torch.cat([p.grad.flatten().cpu() for p in tr.policy.parameters()])


@pytest.mark.parametrize("dtype,loss_tol,grad_rel_tol", [("float32", FP32_LOSS_TOL, 1e-3),
                                                         ("bfloat16", BF16_LOSS_TOL, 0.06)])
def test_cuda_losses_match_cpu_fp32(dtype, loss_tol, grad_rel_tol):
    trajs = make_trajectories(3, 4, seed=1)
    cpu, gpu = _trainer("cpu", "float32"), _trainer("cuda", dtype)
    a, b = cpu.forward_backward(trajs), gpu.forward_backward(trajs)
    for field in ("total", "policy", "kl", "entropy"):
        assert getattr(b, field) == pytest.approx(getattr(a, field), abs=loss_tol), field
    ga, gb = _grads(cpu), _grads(gpu)
    assert float((ga - gb).norm() / ga.norm()) < grad_rel_tol
    # a few whole steps stay together too
    for seed in (2, 3):
        ma, mb = cpu.train_step(make_trajectories(3, 4, seed=seed)), gpu.train_step(make_trajectories(3, 4, seed=seed))
        assert mb["losses/policy"] == pytest.approx(ma["losses/policy"], abs=loss_tol * 4)


def test_everything_lives_on_the_gpu_and_exports_bf16_to_the_cpu():
    tr = _trainer("cuda", "auto", gradient_checkpointing=True)
    assert tr.device.type == "cuda" and tr.compute_dtype is torch.bfloat16  # auto on a GPU
    tr.train_step(make_trajectories(3, 4, seed=4))
    for p in tr.policy.parameters():
        assert p.device.type == "cuda" and p.dtype is torch.float32
    for state in tr.optimizer.state.values():
        assert all(t.device.type == "cuda" for t in state.values() if isinstance(t, torch.Tensor) and t.dim())
    assert all(p.device.type == "cuda" for p in tr.ref_model.parameters())
    assert all(t.device.type == "cpu" and t.dtype is torch.bfloat16 for _, t in tr.named_tensors())
    assert torch.cuda.max_memory_allocated() > 0


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_deepspeed_zero_stages_on_cuda_match_the_torch_backend(tmp_path):
    from test_deepspeed import check_against_torch, run_workers
    report = run_workers(tmp_path, world=1, stages="0,1,2,3", port=29300 + os.getpid() % 190, device="cuda")
    check_against_torch(tmp_path, report, stages=(0, 1, 2, 3), device="cuda")


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_deepspeed_bf16_on_cuda_matches_deepspeed_bf16_on_the_cpu(tmp_path):
    """DeepSpeed's bf16 mode runs the model in bf16 weights, so its first loss is bf16's, not fp32's (0.0815 on the
    CPU, 0.0818 on an H200, fp32 0.0904): the CUDA path is checked against the same mode on the CPU."""
    from test_deepspeed import run_workers
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cpu").mkdir()
    report = run_workers(tmp_path / "cuda", world=1, stages="0,1,2,3", port=29500 + os.getpid() % 190,
                         device="cuda", dtype="bfloat16")
    cpu = run_workers(tmp_path / "cpu", world=1, stages="0", port=29100 + os.getpid() % 190, dtype="bfloat16")
    reference = cpu["0"]["metrics"][0]["losses/policy"]
    for stage in ("0", "1", "2", "3"):
        rep = report[stage]
        first = rep["metrics"][0]  # before any update: only the device's kernels differ
        assert first["losses/policy"] == pytest.approx(reference, abs=DS_BF16_TOL), stage
        assert rep["third_step_changed"] and rep["restore_matches"], stage
