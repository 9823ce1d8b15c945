"""LoRA on the trainers (trainer.lora): B starts at zero so the policy is the base model exactly; only adapter
parameters get gradients and sit in the optimizer; only adapters leave the trainer; a checkpoint's adapter loads
in peft over transformers' model with the same logits, its merged folder too; a checkpoint restores the adapters;
the DeepSpeed backend trains the same adapters."""
import importlib.util
import os

import pytest
import torch

from rollart.models import load_model
from rollart.models.lora import LoraConfig, is_adapter_bucket
from rollart.tools.make_tiny_model import make_tiny_model
from rollart.trainer import TrainerConfig
from rollart.trainer.torch_trainer import TorchTrainer

from tiny_policy import make_trajectories

os.environ.setdefault("HF_HUB_OFFLINE", "1")
LORA = LoraConfig(rank=4, alpha=8.0, target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(make_tiny_model(tmp_path_factory.mktemp("lora") / "base", vocab=512, seed=3, init_std=0.2))


def trainer(folder, lora=LORA, **kw) -> TorchTrainer:
    return TorchTrainer(TrainerConfig(model_path=folder, num_threads=1, lr=5e-2, kl_coef=0.1, lora=lora, **kw))


def ids(n: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 32, (2, n), generator=torch.Generator().manual_seed(seed))


def test_zero_initialised_adapters_give_exactly_the_base_model(folder):
    t = trainer(folder)
    base = load_model(folder)
    with torch.no_grad():
        assert torch.equal(t.policy(ids()), base(ids()))


def test_only_adapters_get_gradients_sit_in_the_optimizer_and_leave_the_trainer(folder):
    t = trainer(folder)
    adapters = {n for n, p in t.policy.named_parameters() if ".lora_" in n}
    trainable = {n for n, p in t.policy.named_parameters() if p.requires_grad}
    assert trainable == adapters and len(adapters) == 2 * 5 * 4  # A and B of 5 modules in 4 layers
    assert {id(p) for p in t.trainable_params} == {id(p) for n, p in t.policy.named_parameters() if n in adapters}
    t.train_step(make_trajectories(3, 4, seed=1))
    frozen = [n for n, p in t.policy.named_parameters() if n not in adapters and p.grad is not None]
    assert frozen == [] and all(p.grad is not None for n, p in t.policy.named_parameters() if n in adapters)
    out = t.named_tensors()
    assert is_adapter_bucket([n for n, _ in out]) and len(out) == len(adapters)
    moved = sum(x.numel() for _, x in out)
    total = sum(p.numel() for n, p in t.policy.named_parameters() if n not in adapters)
    assert moved / total < 0.1  # rank 4 on a 0.9M model: a few percent


def test_a_checkpoint_adapter_loads_in_peft_and_its_merged_folder_gives_the_same_logits(folder, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    t = trainer(folder)
    for s in range(3):
        t.train_step(make_trajectories(3, 4, seed=s))
    x = ids(16, seed=5)
    with torch.no_grad():
        ours = t.policy(x)
        assert not torch.allclose(ours, load_model(folder)(x))  # the adapters moved the policy
    ckpt = t.save_checkpoint(str(tmp_path / "ckpt"), {"k": 1})
    hf = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(hf, os.path.join(ckpt, "adapter")).eval()
    with torch.no_grad():
        torch.testing.assert_close(peft_model(x).logits, ours, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(load_model(os.path.join(ckpt, "model"))(x), ours, atol=1e-4, rtol=1e-4)
    fresh = trainer(folder)
    assert fresh.load_checkpoint(ckpt) == {"k": 1} and fresh.version == 3
    with torch.no_grad():
        assert torch.equal(fresh.policy(x), ours)


def test_full_fine_tuning_is_rank_zero(folder):
    t = trainer(folder, lora=LoraConfig(rank=0))
    assert all(p.requires_grad for p in t.policy.parameters())
    assert not is_adapter_bucket([n for n, _ in t.named_tensors()])


def test_a_target_that_matches_nothing_is_one_line(folder):
    from rollart.config import ConfigError
    with pytest.raises(ConfigError, match=r"lora.target_modules=\['qproj'\]: choose among"):
        LoraConfig(rank=4, target_modules=("qproj",))


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_deepspeed_trains_the_same_adapters_as_the_torch_backend(folder, tmp_path, monkeypatch):
    from rollart.trainer.deepspeed_trainer import DeepSpeedTrainer
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_PORT", str(port))
    cfg = TrainerConfig(model_path=folder, num_threads=1, lr=5e-2, kl_coef=0.1, lora=LORA, backend="deepspeed",
                        master_port=port)
    ds = DeepSpeedTrainer(cfg)
    ref = trainer(folder)
    try:
        for s in range(2):
            a, b = ds.train_step(make_trajectories(3, 4, seed=s)), ref.train_step(make_trajectories(3, 4, seed=s))
            assert a["losses/policy"] == pytest.approx(b["losses/policy"], rel=1e-4, abs=1e-6)
        got, want = dict(ds.named_tensors()), dict(ref.named_tensors())
        assert set(got) == set(want) and is_adapter_bucket(got)
        for name in want:
            torch.testing.assert_close(got[name], want[name], atol=2e-5, rtol=1e-4)
        ckpt = ds.save_checkpoint(str(tmp_path / "ds"), {})
        assert os.path.isfile(os.path.join(ckpt, "adapter", "adapter_model.safetensors"))
    finally:
        ds.close()


def test_a_run_gives_its_engines_the_trainers_lora():
    from rollart.config import ConfigError, apply_overrides
    from rollart.pipeline import PipelineConfig
    from rollart.pipeline.resolve import resolve
    cfg = apply_overrides(PipelineConfig(), ["trainer.lora.rank=8", "trainer.lora.target_modules=q_proj,v_proj"])
    engine = resolve(cfg).engine.lora
    assert (engine.rank, engine.target_modules) == (8, ("q_proj", "v_proj"))
    with pytest.raises(ConfigError, match="engine.lora=.*derived from trainer.lora"):
        resolve(apply_overrides(PipelineConfig(), ["engine.lora.rank=4"]))
