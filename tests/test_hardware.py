"""The hardware catalogue (the papers' GPU tables, one model-shape type) and the roofline speed model:
prefill is compute-bound (H800 wins), decode bandwidth-bound (H20 wins), config errors."""
import pytest

from rollart.hardware import HARDWARE, MODELS, HardwareSpec, ModelShape, SpeedModel, SpeedModelConfig, StepWork, model_shape

H800, H20, QWEN3_8B = HARDWARE["H800"], HARDWARE["H20"], MODELS["Qwen3-8B"]


def test_rollart_table2_figures():
    assert (H800.tflops, H800.memory_gb, H800.hbm_gb_s, H800.intra_gb_s, H800.relative_cost) == (989.5, 80, 3350, 400, 2.85)
    assert (H20.tflops, H20.memory_gb, H20.hbm_gb_s, H20.intra_gb_s, H20.relative_cost) == (148, 96, 4000, 900, 1.00)


def test_hetrl_table1_figures_and_the_a100_variants():
    rows = {n: (HARDWARE[n].memory_gb, HARDWARE[n].tflops, HARDWARE[n].hbm_gb_s, HARDWARE[n].intra_gb_s)
            for n in ("A100", "L40S", "L4")}
    assert rows == {"A100": (40, 312, 2039, 600), "L40S": (48, 366, 864, 64), "L4": (24, 121, 300, 64)}
    assert HARDWARE["A100-80GB"].memory_gb == 80
    assert HARDWARE["cpu"].kind == "cpu" and HARDWARE["serverless"].kind == "serverless"


def test_a_gpu_class_needs_every_attribute():
    with pytest.raises(ValueError, match="hbm_gb_s must be > 0"):
        HardwareSpec("X", tflops=1, memory_gb=1, intra_gb_s=1)
    with pytest.raises(ValueError, match="kind"):
        HardwareSpec("X", kind="tpu")


def test_one_model_shape_serves_planner_and_speed_model():
    m = model_shape("qwen3-32b")
    assert m is MODELS["Qwen3-32B"]
    assert m.q_dim == 64 * 128 and m.kv_dim == 8 * 128 and m.n_params == 32.8e9
    assert m.params == 64 * (4 * 5120 ** 2 + 3 * 5120 * 25600) + 2 * 151936 * 5120  # HetRL App. B count
    assert MODELS["Qwen3-1.7B"].n_params == MODELS["Qwen3-1.7B"].params  # no published count: the cost-model one
    assert ModelShape("x", 2, 64, 128).kv_dim == 64
    with pytest.raises(KeyError, match="Qwen3-8B"):
        model_shape("GPT-5")


def _ratio(work, **kw):
    """H800 step time / H20 step time for the same work, fixed overhead excluded."""
    h800 = SpeedModel(SpeedModelConfig(hw_class="H800", step_overhead_s=0.0, **kw))
    h20 = SpeedModel(SpeedModelConfig(hw_class="H20", step_overhead_s=0.0, **kw))
    return h800.step_seconds(work) / h20.step_seconds(work)


def test_prefill_is_compute_bound_and_h800_wins():
    work = StepWork(prefill_tokens=4096, prefill_context=2048)
    assert _ratio(work) == pytest.approx(H20.tflops / H800.tflops, rel=1e-9)  # pure compute: TFLOPS ratio


def test_small_batch_decode_is_bandwidth_bound_and_h20_wins():
    work = StepWork(decode_seqs=8, decode_context_tokens=8 * 2000)
    assert _ratio(work) == pytest.approx(H20.hbm_gb_s / H800.hbm_gb_s, rel=1e-9)  # pure memory: bandwidth ratio


def test_step_time_grows_with_work_and_tp_divides_it():
    m = SpeedModel(hw_class="H20")
    small, big = StepWork(decode_seqs=1, decode_context_tokens=100), StepWork(decode_seqs=64, decode_context_tokens=64 * 8000)
    assert m.step_seconds(big) > m.step_seconds(small) > 0
    assert m.step_seconds(StepWork()) == 0.0
    tp2 = SpeedModel(hw_class="H20", tp=2, step_overhead_s=0.0)
    tp1 = SpeedModel(hw_class="H20", step_overhead_s=0.0)
    assert tp2.step_seconds(big) == pytest.approx(tp1.step_seconds(big) / 2)


def test_one_8b_decode_step_reads_the_weights_once():
    m = SpeedModel(hw_class="H800", mbu=1.0, step_overhead_s=0.0)
    t = m.step_seconds(StepWork(decode_seqs=1, decode_context_tokens=0))
    assert t == pytest.approx(QWEN3_8B.weight_bytes / (H800.hbm_gb_s * 1e9), rel=1e-3)


def test_kv_capacity():
    assert SpeedModel(hw_class="H20").kv_capacity_tokens > SpeedModel(hw_class="H800").kv_capacity_tokens > 0


def test_a_token_scale_makes_a_real_step_stand_for_that_many_steps_over_longer_contexts():
    k = 64
    plain, scaled = SpeedModel(hw_class="H800"), SpeedModel(hw_class="H800", token_scale=k)
    decode = StepWork(decode_seqs=16, decode_context_tokens=16 * 300)
    long = StepWork(decode_seqs=16, decode_context_tokens=16 * 300 * k)
    assert scaled.step_seconds(decode) == pytest.approx(k * plain.step_seconds(long))
    prefill = StepWork(prefill_tokens=100, prefill_context=50)
    assert scaled.step_seconds(prefill) == pytest.approx(plain.step_seconds(StepWork(prefill_tokens=100 * k,
                                                                                     prefill_context=50 * k)))
    # at hundreds of tokens of context a decode step barely grows with the batch; at the scaled contexts the KV
    # reads dominate it, and an H20's bandwidth wins the whole step
    def growth(m):
        return (m.step_seconds(StepWork(decode_seqs=32, decode_context_tokens=32 * 300))
                / m.step_seconds(StepWork(decode_seqs=8, decode_context_tokens=8 * 300)))
    assert growth(plain) < 1.1 < 2 < growth(scaled)
    h20 = SpeedModel(hw_class="H20", token_scale=k, step_overhead_s=0.0)
    h800 = SpeedModel(hw_class="H800", token_scale=k, step_overhead_s=0.0)
    assert h800.step_seconds(decode) / h20.step_seconds(decode) == pytest.approx(H20.hbm_gb_s / H800.hbm_gb_s, rel=0.02)


@pytest.mark.parametrize("kw, match", [(dict(hw_class="TPU"), "speed.hw_class"),
                                       (dict(hw_class="cpu"), "speed.hw_class"), (dict(model="GPT-5"), "speed.model"),
                                       (dict(mfu=0.0), "speed.mfu"), (dict(tp=0), "tp"),
                                       (dict(token_scale=0.5), "speed.token_scale")])
def test_bad_config_names_the_setting(kw, match):
    with pytest.raises(ValueError, match=match):
        SpeedModelConfig(**kw)
