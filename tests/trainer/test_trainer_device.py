"""Covers the trainer's device and precision on the CPU: bf16 autocast against fp32 (losses within a stated
tolerance), fp32 master weights, micro-batching and gradient checkpointing leaving gradients unchanged."""
import pytest
import torch

from rollart.trainer import TrainerConfig
from rollart.trainer.torch_trainer import TorchTrainer

from tiny_policy import make_model, make_trajectories

LOSS_TOL = 5e-3
"""bf16 autocast vs fp32 on the tiny model: |loss difference| (measured ~6e-4 at losses ~0.1)."""
GRAD_REL_TOL = 0.06
"""... and ||g_bf16 - g_fp32|| / ||g_fp32|| (measured ~0.02)."""


def _trainer(**kw) -> TorchTrainer:
    cfg = {"device": "cpu", "num_threads": 1, "kl_coef": 0.05, "entropy_coef": 0.01, **kw}
    return TorchTrainer(TrainerConfig(**cfg), model=make_model(0))


def _grads(tr: TorchTrainer) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in tr.policy.parameters()])


@pytest.mark.parametrize("seed", [0, 1])
def test_bf16_on_cpu_matches_fp32_within_tolerance(seed):
    trajs = make_trajectories(3, 4, seed=seed)
    fp32, bf16 = _trainer(dtype="float32"), _trainer(dtype="bfloat16")
    a, b = fp32.forward_backward(trajs), bf16.forward_backward(trajs)
    for field in ("total", "policy", "kl", "entropy"):
        assert getattr(b, field) == pytest.approx(getattr(a, field), abs=LOSS_TOL), field
    ga, gb = _grads(fp32), _grads(bf16)
    assert float((ga - gb).norm() / ga.norm()) < GRAD_REL_TOL
    assert not torch.equal(ga, gb)  # bf16 did run: its rounding shows


def test_bf16_keeps_fp32_master_weights_and_exports_bf16():
    tr = _trainer(dtype="bfloat16")
    assert tr.compute_dtype is torch.bfloat16 and tr.device.type == "cpu"
    before = {n: p.detach().clone() for n, p in tr.policy.named_parameters()}
    m = tr.train_step(make_trajectories(3, 4, seed=3))
    assert all(torch.isfinite(torch.tensor(v)) for v in m.values())
    assert all(p.dtype is torch.float32 for p in tr.policy.parameters())  # master weights
    assert any(not torch.equal(before[n], p) for n, p in tr.policy.named_parameters())
    exported = dict(tr.named_tensors())
    assert all(t.dtype is torch.bfloat16 and t.device.type == "cpu" for t in exported.values())
    for n, p in tr.policy.named_parameters():
        assert torch.equal(exported[n], p.detach().to(torch.bfloat16))


def test_auto_dtype_on_cpu_is_fp32_with_no_autocast():
    tr = _trainer()
    assert tr.compute_dtype is torch.float32 and tr.device == torch.device("cpu")
    assert all(t.dtype is torch.float32 for _, t in tr.named_tensors())


def test_micro_batched_gradients_equal_whole_batch_in_fp32():
    trajs = make_trajectories(4, 4, seed=5)
    whole, micro = _trainer(micro_batch_tokens=100_000), _trainer(micro_batch_tokens=24)
    a, b = whole.forward_backward(trajs), micro.forward_backward(trajs)
    assert a.total == pytest.approx(b.total, abs=1e-6) and a.loss_tokens == b.loss_tokens
    assert torch.allclose(_grads(whole), _grads(micro), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gradient_checkpointing_gives_the_same_gradients(dtype):
    trajs = make_trajectories(3, 4, seed=6)
    plain, ckpt = _trainer(dtype=dtype), _trainer(dtype=dtype, gradient_checkpointing=True)
    calls = {"plain": 0, "ckpt": 0}
    for name, tr in (("plain", plain), ("ckpt", ckpt)):
        tr.policy.model.layers[0].mlp.register_forward_pre_hook(lambda *_, k=name: calls.__setitem__(k, calls[k] + 1))
    a, b = plain.forward_backward(trajs), ckpt.forward_backward(trajs)
    assert calls["ckpt"] == 2 * calls["plain"] > 0  # each layer ran again in backward
    assert a.total == pytest.approx(b.total, abs=1e-6)
    assert torch.allclose(_grads(plain), _grads(ckpt), atol=1e-6, rtol=1e-5)


def test_gradient_checkpointing_on_a_model_without_it_is_a_clear_error():
    model = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8))
    with pytest.raises(ValueError, match="trainer.gradient_checkpointing=true: Sequential supports neither"):
        TorchTrainer(TrainerConfig(device="cpu", gradient_checkpointing=True), model=model)


def test_cuda_without_a_gpu_is_refused_in_one_line():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: covered by test_trainer_cuda.py")
    from rollart.config import ConfigError
    with pytest.raises(ConfigError, match="trainer.device='cuda' but torch sees no CUDA device"):
        _trainer(device="cuda")
