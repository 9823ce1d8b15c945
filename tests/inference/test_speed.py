"""Hardware speed model: prefill is compute-bound (H800 wins), decode bandwidth-bound (H20 wins), config errors."""
import pytest

from rollart.inference.speed import H20, H800, QWEN3_8B, SpeedModel, SpeedModelConfig, StepWork


def _ratio(work, **kw):
    """H800 step time / H20 step time for the same work, fixed overhead excluded."""
    h800 = SpeedModel(SpeedModelConfig(hardware="H800", step_overhead_s=0.0, **kw))
    h20 = SpeedModel(SpeedModelConfig(hardware="H20", step_overhead_s=0.0, **kw))
    return h800.step_seconds(work) / h20.step_seconds(work)


def test_prefill_is_compute_bound_and_h800_wins():
    work = StepWork(prefill_tokens=4096, prefill_context=2048)
    assert _ratio(work) == pytest.approx(H20.tflops / H800.tflops, rel=1e-9)  # pure compute: TFLOPS ratio


def test_small_batch_decode_is_bandwidth_bound_and_h20_wins():
    work = StepWork(decode_seqs=8, decode_context_tokens=8 * 2000)
    assert _ratio(work) == pytest.approx(H20.hbm_gbps / H800.hbm_gbps, rel=1e-9)  # pure memory: bandwidth ratio


def test_step_time_grows_with_work_and_tp_divides_it():
    m = SpeedModel(hardware="H20")
    small, big = StepWork(decode_seqs=1, decode_context_tokens=100), StepWork(decode_seqs=64, decode_context_tokens=64 * 8000)
    assert m.step_seconds(big) > m.step_seconds(small) > 0
    assert m.step_seconds(StepWork()) == 0.0
    tp2 = SpeedModel(hardware="H20", tp=2, step_overhead_s=0.0)
    tp1 = SpeedModel(hardware="H20", step_overhead_s=0.0)
    assert tp2.step_seconds(big) == pytest.approx(tp1.step_seconds(big) / 2)


def test_one_8b_decode_step_reads_the_weights_once():
    m = SpeedModel(hardware="H800", mbu=1.0, step_overhead_s=0.0)
    t = m.step_seconds(StepWork(decode_seqs=1, decode_context_tokens=0))
    assert t == pytest.approx(QWEN3_8B.weight_bytes / (H800.hbm_gbps * 1e9), rel=1e-3)


def test_kv_capacity_and_delay():
    assert SpeedModel(hardware="H20").kv_capacity_tokens > SpeedModel(hardware="H800").kv_capacity_tokens > 0
    m = SpeedModel(hardware="H20", time_scale=0.5)
    work = StepWork(prefill_tokens=1000, prefill_context=500)
    assert m.delay_seconds(work, real_seconds=0.0) == pytest.approx(0.5 * m.step_seconds(work))
    assert m.delay_seconds(work, real_seconds=10.0) == 0.0


@pytest.mark.parametrize("kw, match", [(dict(hardware="A100"), "speed.hardware"), (dict(model="GPT-5"), "speed.model"),
                                       (dict(mfu=0.0), "speed.mfu"), (dict(tp=0), "tp")])
def test_bad_config_names_the_setting(kw, match):
    with pytest.raises(ValueError, match=match):
        SpeedModelConfig(**kw)
