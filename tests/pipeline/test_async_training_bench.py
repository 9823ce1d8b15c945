"""tools/bench/async_training.py's calibration: weight pulls sized as Table 4 measured them against the step, and the
token profiles of its tasks (what tools/bench/affinity.py's Fig. 4 runs for them)."""
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "bench"))
try:
    import async_training
finally:
    sys.path.pop(0)


def test_the_async_bench_sizes_its_pulls_from_sync_plus_rollout_and_splits_them_as_the_paper_does(tiny_model):
    link, pull_s = async_training.paper_link({"rollout_s": 2.0, "pull_bytes": 560_000})
    assert pull_s == pytest.approx(2.0 * 6.2 / (0.69 * 366.0)) and link == pytest.approx(560_000 / pull_s)
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
