"""pd=true in a training run: prefill and decode worker groups, the prompts' K/V handed over, never recomputed."""
import asyncio

import pytest

import envs  # noqa: F401
from rollart.config import ConfigError
from rollart.pipeline import Coordinator
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.proxy_config import ProxyConfig
from rollart.rollout.group_scheduler import SchedulerConfig
from run_configs import config

LAKE = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
                max_new_tokens=4, max_turns=3)


PD = dict(total_steps=2, batch_groups=1, rollout=SchedulerConfig(group_size=2, max_concurrency=4), eval_episodes=8,
          run_name="pd", mode="sync", pd=True, num_inference_workers=2, hw_classes=("H800", "H20"))
"""Two sync steps with a prefill (H800) and a decode (H20) worker group."""


def test_a_pd_run_hands_the_kv_from_the_prefill_group_to_the_decode_group(tmp_path, tiny_model):
    result = asyncio.run(Coordinator(config(tmp_path, tiny_model, **PD), [LAKE]).run())
    assert result.steps == 2
    last = result.history[-1]
    assert last["rollout/routing/pd_kv_tokens"] > 0 and last["rollout/routing/pd_kv_bytes"] > 0
    assert last["rollout/routing/pd_reprefill_tokens"] == 0
    by_class = {w["hw_class"]: w for w in result.workers.values()}
    prefill, decode = by_class["H800"], by_class["H20"]
    assert prefill["requests"] >= decode["requests"] > 0
    assert decode["cached_tokens"] == decode["prompt_tokens"] - decode["finished"]  # all but the first token came as K/V


@pytest.mark.parametrize("kw, message", [
    (dict(num_inference_workers=1, hw_classes=("H20",)), "pd=true needs a prefill and a decode worker group"),
    (dict(proxy=ProxyConfig(hw_affinity={"FrozenLake": "H800"})), "would route nothing"),
])
def test_a_bad_pd_combination_is_one_clear_line(tmp_path, tiny_model, kw, message):
    with pytest.raises(ConfigError, match=message):  # found before anything starts
        Coordinator(config(tmp_path, tiny_model, **{**PD, **kw}), [LAKE])
    assert not (tmp_path / "pd").exists()
