"""tools/bench/async_training.py's calibration: the emulated trainer sized by Fig. 3's training share, weight pulls as
Table 4 measured them against the step, and the token profiles of its tasks (what tools/bench/affinity.py's Fig. 4
runs for them)."""
import math

import pytest

from bench_modules import bench_module

async_training = bench_module("async_training")


def test_the_calibration_sizes_the_trainer_and_the_pull_as_fig_3_and_table_4_do():
    work = async_training.Workload()
    cal = async_training.Calibration(rollout_s=2.0, tokens=6500, pull_bytes=560_000, work=work,
                                     emulated_per_real_token=30.0)
    # Qwen3-8B's step on one emulated H800, over the batch's tokens as the paper's profiles made them (30 a real one)
    one_h800 = 6 * 8.19e9 * 6500 * 30 / (989.5e12 * 0.4) * work.gen_scale
    assert cal.one_h800_s == pytest.approx(one_h800)
    assert cal.train_target_s == pytest.approx(2.0 * 23 / 69)  # training against generation + environment
    assert cal.trainer_devices == round(one_h800 / (2.0 * 23 / 69))
    # at the MFU that makes the step exactly the target
    speed = async_training.TrainerSpeedConfig("H800", cal.trainer_devices, "Qwen3-8B", cal.trainer_mfu, work.gen_scale,
                                              30.0)
    assert speed.step_seconds(6500) == pytest.approx(cal.train_target_s)
    assert cal.pull_s == pytest.approx(2.0 * 6.2 / (0.69 * 366.0))  # Table 4's pull against Fig. 3's step
    fields = cal.emulation()
    assert fields["emulation"]["trainer_hw_class"] == "H800"
    assert fields["emulation"]["trainer_devices"] == cal.trainer_devices
    assert fields["emulation"]["token_scale"] == 30.0 and fields["emulation"]["trainer_mfu"] == cal.trainer_mfu
    assert fields["emulation"]["task_profiles"] == {"FrozenLake": "frozenlake", "MathTool": "math", "GuessNumber": "game"}
    # each stand-in trajectory carries a paper trajectory's work: its turns are its TaskSpec's max_turns
    assert fields["emulation"]["task_turns"] == {"FrozenLake": 8, "MathTool": 3, "GuessNumber": 5}
    assert async_training.Workload(paper_turns=False).emulation()["task_turns"] == {}
    assert fields["weight_link_bytes_per_s"] == pytest.approx(560_000 / cal.pull_s)
    assert cal.push_s == pytest.approx(2.0 * 32.4 / (0.69 * 366.0))  # and its push
    assert fields["weight_push_bytes_per_s"] == pytest.approx(560_000 / cal.push_s)
    assert "trainer %d × H800" % cal.trainer_devices in cal.line() and "SIMULATED" in cal.line()
    per_step = async_training.Workload(paper_profiles=False, token_scale=4.0)  # the workload before 2026-12-07
    assert per_step.gen_scale == 3.0 and per_step.task_profiles == {}
    old = async_training.Calibration(rollout_s=2.0, tokens=6500, pull_bytes=560_000, work=per_step,
                                     emulated_per_real_token=30.0)
    assert old.emulation()["emulation"]["token_scale"] == 4.0  # its own token scale, not a measured one


def test_a_version_moves_in_as_many_buckets_as_qwen3_8b_in_1_gb_ones(tiny_model):
    from rollart.models import ModelConfig
    n = ModelConfig.from_pretrained(tiny_model).num_params() * 4
    assert math.ceil(n / async_training.paper_bucket_bytes(tiny_model)) == async_training.PAPER_BUCKETS


def test_the_async_bench_reads_its_tasks_token_profiles_off_its_own_tokenizer(tiny_model):
    """What affinity.py's Fig. 4 runs for this bench's stand-ins: a first prompt longer than what a later turn adds,
    the tasks' turn caps and their fixed answer lengths."""
    work = async_training.Workload()
    profiles = {p.name: p for p in work.profiles(tiny_model)}
    assert set(profiles) == {"FrozenLake", "MathTool", "GuessNumber"}
    for p in profiles.values():
        assert p.prompt_tokens > p.obs_tokens > 0
    assert profiles["MathTool"].response_tokens == (work.math_cot, work.math_cot)
    assert profiles["FrozenLake"].response_tokens == (1, 1) and profiles["FrozenLake"].turns == (8, 8)
