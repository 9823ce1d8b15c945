"""The weight_sync bench's lora_sync_bytes_frac: what a LoRA trainer publishes per version over what a full
fine-tuning trainer publishes, on the bench's SmolLM2-135M-shaped model. Rank 16 on q/k/v/o (the recipe's LoRA)
stays under the 0.02 target; a LoRA of rank 128 on every linear layer does not, so the key can fail."""
import pytest

pytest.importorskip("peft")

from rollart.models.lora import ATTENTION, MLP, LoraConfig
from rollart.trainer import TrainerConfig
from rollart.trainer.torch_trainer import TorchTrainer

from bench_modules import bench_module


@pytest.fixture(scope="module")
def smollm2_shape(tmp_path_factory):
    return bench_module("weight_sync").smollm2_shaped(str(tmp_path_factory.mktemp("shape") / "smollm2"))


def _published_bytes(folder: str, lora: LoraConfig) -> int:
    trainer = TorchTrainer(TrainerConfig(model_path=folder, dtype="bfloat16", num_threads=1, lora=lora))
    return sum(t.numel() * t.element_size() for _, t in trainer.named_tensors())


def test_lora_versions_move_a_small_fraction_and_a_large_lora_misses(smollm2_shape):
    full = _published_bytes(smollm2_shape, LoraConfig())
    assert full / 2 == pytest.approx(134.5e6, rel=0.01)  # SmolLM2-135M's parameters, tied embedding once
    recipe = _published_bytes(smollm2_shape, LoraConfig(rank=16, alpha=32)) / full
    large = _published_bytes(smollm2_shape, LoraConfig(rank=128, alpha=256, target_modules=ATTENTION + MLP)) / full
    assert recipe <= 0.02 < large
    assert recipe == pytest.approx(61440 * 30 / 134.5e6, rel=0.02)  # (4 A + 4 B) per layer: 61,440 parameters
