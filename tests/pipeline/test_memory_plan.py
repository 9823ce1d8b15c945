"""The memory plan of one GPU shared by the engines and the trainer (rollart.pipeline.memory_plan): what it counts,
what it gives the KV cache, what it refuses (one line), what releasing the KV cache while the trainer steps buys.
The plan is arithmetic over the model's shape and the configs, so it is checked here without a GPU; a CPU run has
none."""
import dataclasses

import pytest

from rollart.config import ConfigError
from rollart.engine import EngineConfig
from rollart.models.lora import LoraConfig
from rollart.pipeline.memory_plan import GIB, Shape, apply_memory_plan, plan_memory, shared_gpu
from rollart.trainer import TrainerConfig
from run_configs import config

QWEN3_0_6B = Shape(params=596_049_920, hidden=1024, intermediate=3072, layers=28, vocab=151_936, kv_heads=8,
                   head_dim=128, q_dim=2048, max_positions=40_960)
"""Qwen3-0.6B's config.json (tied embeddings)."""
H100 = 80 * GIB


STEP_4K = TrainerConfig(micro_batch_tokens=4096)
"""At the default 16384 tokens a micro-batch of Qwen3-0.6B needs ~60 GiB (its 152k-entry float32 logits: 28)."""


def plan(total=H100, engine=None, trainer=STEP_4K, **kw):
    return plan_memory(QWEN3_0_6B, engine or EngineConfig(), trainer, device="cuda:0", total=total, **kw)


def test_a_small_model_fits_an_h100_and_the_kv_cache_takes_what_is_left():
    p = plan(engine=EngineConfig(max_model_len=2048))
    assert p.peak <= p.limit == int(0.9 * H100)
    assert p.kv_blocks == 2 * 64 * 2048 // 16  # the engine's own cap (twice max_num_seqs full sequences)
    big = plan(engine=EngineConfig(max_model_len=8192))  # the cap (120 GiB of KV) is past what is left
    per_block = big.kv_bytes // big.kv_blocks
    assert big.kv_blocks < 2 * 64 * 8192 // 16 and 0 <= big.limit - big.peak < per_block  # all that is left
    assert p.line().startswith("memory plan (cuda:0, 80.0 GiB, engine and trainer share it): trainer ")
    assert "[estimate]" in p.line() and "\n" not in p.line()


def test_what_the_trainer_holds_follows_its_config():
    full = plan()
    lora = plan(trainer=dataclasses.replace(STEP_4K, lora=LoraConfig(rank=16)))
    assert lora.trainer_resident < 0.4 * full.trainer_resident  # no AdamW state for the frozen base
    ckpt = plan(trainer=dataclasses.replace(STEP_4K, gradient_checkpointing=True))
    assert ckpt.trainer_step < full.trainer_step
    with_ref = plan(trainer=dataclasses.replace(STEP_4K, kl_coef=0.1))
    assert with_ref.trainer_resident - full.trainer_resident == 4 * QWEN3_0_6B.params


def test_the_adapter_count_is_what_lora_attaches(tiny_model):
    """The plan's LoRA parameter count against the adapters the trainer really attaches to a model."""
    from rollart.models import CausalLM, ModelConfig
    from rollart.trainer.lora import attach
    mc = ModelConfig.from_pretrained(tiny_model)
    lora = LoraConfig(rank=4, target_modules=("q_proj", "v_proj", "down_proj"))
    model = attach(CausalLM(mc), lora)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert Shape.of(mc).lora_params(lora) == trained


def test_a_run_that_cannot_fit_is_refused_in_one_line():
    with pytest.raises(ConfigError) as e:
        plan(total=8 * GIB)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("the engine and the trainer do not fit on cuda:0 (8.0 GiB")
    assert "release_kv_while_training=true" in msg and "trainer.lora.rank" in msg


def test_freeing_the_kv_cache_while_the_trainer_steps_fits_what_holding_it_does_not():
    engine = EngineConfig(max_model_len=4096)
    room = plan(total=1000 * GIB, engine=engine)  # to read what each side holds
    need = 4096 // 16 * QWEN3_0_6B.kv_bytes_per_block(16, 2)
    resident = room.trainer_resident + room.engine_fixed
    total = int((resident + room.trainer_step + need // 2) / 0.9)  # all but half a sequence's KV fits
    with pytest.raises(ConfigError, match="do not fit"):
        plan(total=total, engine=engine)
    released = plan(total=total, engine=engine, release_kv=True)
    assert released.kv_blocks >= 4096 // 16 and released.peak <= released.limit
    assert "freed while the trainer steps" in released.line()


def test_a_cpu_run_has_no_memory_plan(tmp_path, tiny_model):
    cfg = config(tmp_path, tiny_model, device="cpu")
    assert shared_gpu(cfg) is None
    assert apply_memory_plan(cfg) is cfg
    on_ray = dataclasses.replace(cfg, actor_mode="process", cluster=dataclasses.replace(cfg.cluster, backend="ray"))
    assert shared_gpu(on_ray) is None  # the actors' nodes hold the devices, not this one


def test_the_activation_estimate_is_what_autograd_saves():
    """Per token and layer, the bytes autograd saves under bf16 autocast on the CPU (a 3-layer model less a
    1-layer one, 512 tokens less 256: weights and logits cancel) against the plan's estimate."""
    import torch

    from rollart.models import CausalLM, ModelConfig
    from rollart.trainer.losses import token_logprobs
    shape = dict(vocab_size=1024, hidden_size=256, intermediate_size=768, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64)

    def saved(layers: int, tokens: int) -> int:
        torch.manual_seed(0)
        model = CausalLM(ModelConfig(num_hidden_layers=layers, **shape))
        ids = torch.randint(0, 1024, (1, tokens))
        storages = {}

        def keep(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                token_logprobs(model(ids), ids)
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        return sum(n for ptr, n in storages.items() if ptr not in weights)

    per_layer = ((saved(3, 512) - saved(3, 256)) - (saved(1, 512) - saved(1, 256))) / 256 / 2
    estimate = Shape.of(ModelConfig(num_hidden_layers=1, **shape)).saved_bytes_per_token_layer(2)
    assert estimate == pytest.approx(per_layer, rel=0.15)


def test_a_gpu_that_does_not_answer_is_one_line():
    """The plan reads the GPU's memory in a short-lived process (so that the coordinator holds no CUDA context);
    where that fails (here: no GPU at all) the run stops in one line saying how to check the GPU."""
    from rollart.pipeline.memory_plan import device_memory
    with pytest.raises(ConfigError) as e:
        device_memory("cuda:7" if not _has_cuda() else "cuda:64")
    assert "\n" not in str(e.value) and "could not read cuda:" in str(e.value) and "mem_get_info" in str(e.value)


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()
