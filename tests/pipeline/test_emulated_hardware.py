"""Emulated hardware for every role of a real run (rollart.emulation): the trainer's step lasts the emulated model's
time on the emulated GPUs, a weight pull the emulated model's bytes over Table 3's link, the run says in one line
what it emulates and, when the real compute outran the emulated time, that its timing is not emulated."""
import asyncio

import pytest

import envs  # noqa: F401
from rollart.config import ConfigError
from rollart.emulation import TABLE3_TCP, TrainerSpeedConfig, link_gb_s, paper_transfer_s
from rollart.hardware import model_shape
from rollart.pipeline import Coordinator
from rollart.rollout.env_manager import TaskSpec
from run_configs import config

FROZEN = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
                  max_new_tokens=1, max_turns=6)


def test_a_train_step_costs_six_flops_per_parameter_and_token_on_the_emulated_gpus():
    speed = TrainerSpeedConfig("H800", devices=4, model="Qwen3-8B", mfu=0.4, time_scale=0.5)
    expected = 6 * 8.19e9 * 10_000 / (4 * 989.5e12 * 0.4) * 0.5
    assert speed.step_seconds(10_000) == pytest.approx(expected)
    assert TrainerSpeedConfig("H20", devices=4).step_seconds(10_000) > 6 * speed.step_seconds(10_000)  # 148 TF
    scaled = TrainerSpeedConfig("H800", devices=4, model="Qwen3-8B", mfu=0.4, time_scale=0.5, token_scale=64)
    assert scaled.step_seconds(10_000) == pytest.approx(64 * expected)  # every real token stands for 64


def test_the_link_is_table_3s_measured_rate():
    assert link_gb_s("Qwen3-8B") == pytest.approx(15.26 / 6.911)
    assert link_gb_s("Qwen3-32B", "rdma") == pytest.approx(61.02 / 9.442)
    size = model_shape("Qwen3-4B").weight_bytes / 1e9  # not in Table 3: the nearest measured model's rate
    nearest = min(TABLE3_TCP, key=lambda m: abs(TABLE3_TCP[m][0] - size))
    assert link_gb_s("Qwen3-4B") == pytest.approx(TABLE3_TCP[nearest][0] / TABLE3_TCP[nearest][1])


def test_a_pull_sized_against_the_step_keeps_table_4s_share_of_fig_3s_step():
    assert paper_transfer_s("pull", 0.54 * 366.0) == pytest.approx(6.2)  # the paper's own generation: its own pull
    shorter = 0.69 * 366.0 / 100  # a 100x shorter step's rollout
    assert paper_transfer_s("pull", shorter, ("generation", "env_reset")) == pytest.approx(0.062)
    assert paper_transfer_s("push", shorter, ("generation", "env_reset")) == pytest.approx(0.324)


@pytest.mark.parametrize("fields,says", [
    (dict(emulation={"model": "Llama-9B"}), "emulation.model='Llama-9B' is unknown"),
    (dict(emulation={"trainer_hw_class": "cpu"}), "emulation.trainer_hw_class='cpu' is not a GPU"),
    (dict(emulation={"trainer_devices": 0}), "emulation.trainer_devices=0 must be >= 1"),
    (dict(emulation={"token_scale": 0.5}), "emulation.token_scale=0.5 must be >= 1"),
    (dict(emulation={"task_profiles": {"FrozenLake": "sokoban"}}), "'FrozenLake': 'sokoban'}: no such paper task"),
    (dict(emulation={"task_profiles": {"FrozenLake": "frozenlake"}, "task_turns": {"MathTool": 3}}),
     r"task_turns=\{'MathTool': 3\}: give each task of emulation.task_profiles its turns"),
    (dict(emulation={"task_profiles": {"FrozenLake": "frozenlake"}, "task_turns": {"FrozenLake": 0}}),
     "task_turns=.'FrozenLake': 0.: give each task"),
])
def test_bad_emulation_settings_are_one_line(tmp_path, tiny_model, fields, says):
    with pytest.raises(ConfigError, match=says):
        config(tmp_path, tiny_model, simulate_hardware=True, **fields)


def test_a_train_step_lasts_the_emulated_trainers_time(tmp_path, tiny_model, capsys):
    """Qwen3-8B on one emulated H20 trainer: ~1 s per step of the run's ~1,300 tokens, far beyond the tiny model's
    real compute: each step lasts its emulated time, and the run prints what it emulates."""
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=2, simulate_hardware=True,
                 emulation={"trainer_hw_class": "H20", "weight_link": "none"})
    result = asyncio.run(Coordinator(cfg, [FROZEN]).run())
    assert "emulated: Qwen3-8B on 1×H20, trainer 1×H20 (MFU 0.4), weight pulls at the real plane's speed; time ×1 " \
        in capsys.readouterr().out
    for h in result.history:
        tokens = h["system/tokens_per_step"]
        assert h["system/train_emulated_s"] == pytest.approx(6 * 8.19e9 * tokens / (148e12 * 0.4), rel=1e-6)
        assert h["system/train_outran"] == 0 and h["system/train_s"] >= h["system/train_emulated_s"] > 0.5, h


def test_a_weight_pull_lasts_the_emulated_models_bytes_over_the_link(tmp_path, tiny_model):
    """The real model's bytes go through the real weight plane at the rate that makes them take what the emulated
    model's take over Table 3's link (times the time scale)."""
    from rollart.models import ModelConfig
    from rollart.pipeline.prepare import prepare_run
    cfg = config(tmp_path, tiny_model, mode="sync", simulate_hardware=True, sim_time_scale=0.5, device="cpu")
    rate = prepare_run(cfg, [FROZEN]).config.weight_link_bytes_per_s
    real_bytes = ModelConfig.from_pretrained(tiny_model).num_params() * 4  # float32 on the CPU
    pull_s = real_bytes / rate
    assert pull_s == pytest.approx(model_shape("Qwen3-8B").weight_bytes / (15.26e9 / 6.911) * 0.5)
    explicit = config(tmp_path, tiny_model, simulate_hardware=True, weight_link_bytes_per_s=1e6)
    assert prepare_run(explicit, [FROZEN]).config.weight_link_bytes_per_s == 1e6  # a rate given wins


def test_a_run_whose_real_compute_outran_the_emulation_says_so(tmp_path, tiny_model, caplog):
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=1, simulate_hardware=True, sim_time_scale=1e-7)
    with caplog.at_level("WARNING", logger="rollart.pipeline"):
        result = asyncio.run(Coordinator(cfg, [FROZEN]).run())
    assert result.history[0]["system/train_outran"] == 1
    assert "trainer: the real compute outran the emulated time in 1 of 1 train steps" in caplog.text


def test_a_weight_push_lasts_its_bytes_over_the_push_link_and_the_pulls_follow_it(tmp_path, tiny_model):
    """weight_push_bytes_per_s emulates the trainer -> store link of Table 4's push: the store takes each bucket at
    that rate, and the workers' pulls, which wait for the store's buckets, cannot end before it."""
    rate = 2e6
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=2, weight_push_bytes_per_s=rate, device="cpu")
    history = asyncio.run(Coordinator(cfg, [FROZEN]).run()).history
    for h in history:
        assert h["system/weight_push_s"] >= 0.95 * h["system/weight_bytes"] / rate > 0.05, h
    assert "weight_push_bytes_per_s=-1.0 must be >= 0" in str(pytest.raises(
        ConfigError, config, tmp_path, tiny_model, weight_push_bytes_per_s=-1.0).value)


def test_the_overlapped_loop_trains_the_next_step_while_the_store_still_fetches_the_version(tmp_path, tiny_model,
                                                                                            monkeypatch):
    """RollArt §6.3's asynchronous weight update engine: in the overlapped loop a version is published once the
    trainer has snapshotted it, the store's fetch over the push link goes on while the next step trains, and the
    update waits for it (its time is logged). Sync+ waits for the push before it goes on."""
    from rollart.models import ModelConfig
    from rollart.pipeline.train_steps import TrainSteps
    push_s = 2.0
    rate = ModelConfig.from_pretrained(tiny_model).num_params() * 4 / push_s
    under_push: dict[str, list[bool]] = {}
    step = TrainSteps._step

    async def watched(self, batch):
        push = self.parts.weights._push
        under_push.setdefault(self.cfg.mode, []).append(push is not None and not push.done())
        return await step(self, batch)

    monkeypatch.setattr(TrainSteps, "_step", watched)
    for mode in ("async", "sync"):
        cfg = config(tmp_path, tiny_model, mode=mode, run_name=mode, total_steps=3, weight_push_bytes_per_s=rate,
                     device="cpu")
        history = asyncio.run(Coordinator(cfg, [FROZEN]).run()).history
        assert max(h.get("system/weight_push_s", 0.0) for h in history) >= 0.95 * push_s, (mode, history)
    assert any(under_push["async"]), under_push
    assert not any(under_push["sync"]), under_push


def test_task_profiles_time_each_request_as_a_turn_of_the_papers_task(tmp_path, tiny_model, capsys):
    """With emulation.task_profiles the workers time every FrozenLake request as a turn of the paper's FrozenLake
    (a 600-token prompt, 512-token observations, 10-40-token answers), whatever the one real token it generates."""
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=1, simulate_hardware=True, sim_time_scale=0.05,
                 emulation={"weight_link": "none", "task_profiles": {"FrozenLake": "frozenlake"}})
    result = asyncio.run(Coordinator(cfg, [FROZEN]).run())
    assert "requests timed as the paper's FrozenLake=frozenlake" in capsys.readouterr().out
    (worker,) = result.workers.values()
    turns = worker["emulated_requests"]
    assert turns == worker["requests"] > 0
    assert 10 * turns <= worker["emulated_decode_tokens"] <= 40 * turns  # the profile's answers, not the real 1
    assert worker["emulated_prefill_tokens"] >= 600 and worker["simulated_scaled_seconds"] > 0


def test_task_turns_reach_the_workers_and_the_emulated_line(tmp_path, tiny_model, capsys):
    """emulation.task_turns: a FrozenLake stand-in of 8 turns has each request stand for 30 / 8 paper turns."""
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=1, simulate_hardware=True, sim_time_scale=0.01,
                 emulation={"weight_link": "none", "task_profiles": {"FrozenLake": "frozenlake"},
                            "task_turns": {"FrozenLake": 8}})
    result = asyncio.run(Coordinator(cfg, [FROZEN]).run())
    assert "FrozenLake=frozenlake (8 turns as 30)" in capsys.readouterr().out
    (worker,) = result.workers.values()
    turns = worker["emulated_requests"]
    assert round(3.75 * 10) * turns <= worker["emulated_decode_tokens"] <= round(3.75 * 40) * turns
