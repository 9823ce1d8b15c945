"""Covers rollart.pipeline: the α-bounded six-step loop, sync/one-off/areal modes, resume, tensorboard output."""
import asyncio
import dataclasses
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import envs  # noqa: F401
from rollart.pipeline import Coordinator
from rollart.pipeline import evaluate as evaluate_module
from rollart.pipeline.train_steps import TrainSteps
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.proxy_config import ProxyConfig
from run_configs import config

FROZEN = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
                  max_new_tokens=1, max_turns=6)
# Slow env turns keep trajectories in flight across weight updates.
SLOW = dataclasses.replace(FROZEN, name="SlowLake", faults={"mean": 0.05, "std": 0.02})


def run(cfg, tasks=(FROZEN,)):
    return asyncio.run(Coordinator(cfg, list(tasks)).run())


@pytest.mark.parametrize("mode,alpha", [("async", 1), ("areal", 1), ("async", 2), ("areal", 0)])
def test_overlapped_modes_train_within_the_bound(tmp_path, tiny_model, mode, alpha):
    result = run(config(tmp_path, tiny_model, mode=mode, alpha=alpha, total_steps=4), [SLOW])
    assert result.steps == 4 and result.version == 4
    for h in result.history:
        # the window opens alpha versions before the agent (inference) LLM, one version behind the trainer
        assert h["rollout/window_start"] == max(h["step"] - 2, 0) - alpha, h
        # staleness is computed by the trainer from the version recorded on every trained token
        if mode == "async":
            assert h["step"] - 1 - h["rollout/staleness_max"] >= h["rollout/window_start"], h
    stats = result.buffer
    assert stats["accepted"] == stats["trained"] + stats["evicted"] + stats["buffered"]
    # both overlapped modes bound starts: never more than alpha batches ahead of training
    assert 2 <= stats["outstanding_groups_max"] <= (alpha + 1) * 2


def test_inflight_trajectories_survive_updates(tmp_path, tiny_model):
    result = run(config(tmp_path, tiny_model, mode="async", alpha=2, total_steps=5), [SLOW])
    # some trained trajectory holds tokens of two policy versions: it kept going through an update
    spans = [h.get("rollout/version_span_max", 0) for h in result.history]
    assert max(spans) >= 1, spans


def test_sync_trains_on_current_version_only(tmp_path, tiny_model):
    result = run(config(tmp_path, tiny_model, mode="sync", total_steps=2))
    assert result.version == 2
    assert all(h["rollout/staleness_max"] == 0 for h in result.history)
    assert all(h["system/weight_pull_exposed_s"] >= 0 for h in result.history)


def test_sync_frees_the_engines_kv_caches_while_the_trainer_steps(tmp_path, tiny_model):
    """release_kv_while_training (one GPU shared with the trainer), here on the CPU: every step frees the caches
    before the trainer steps and allocates them again after; the run trains on as it would."""
    result = run(config(tmp_path, tiny_model, mode="sync", total_steps=2, release_kv_while_training=True))
    assert result.steps == 2 and result.version == 2
    for h in result.history:
        assert h["system/kv_released_bytes"] > 0 and h["system/kv_reclaim_s"] >= 0, h
        assert h["rollout/staleness_max"] == 0


@pytest.mark.parametrize("fields,says", [
    (dict(mode="async"), "release_kv_while_training=true needs mode=sync"),
    (dict(mode="sync", engine={"backend": "vllm"}), "engine.backend=vllm cannot free its KV cache"),
])
def test_releasing_the_kv_cache_is_refused_where_it_cannot_work(tmp_path, tiny_model, fields, says):
    from rollart.config import ConfigError
    from rollart.engine import EngineConfig
    if "engine" in fields:
        fields["engine"] = EngineConfig(**fields["engine"])
    with pytest.raises(ConfigError, match=says):
        config(tmp_path, tiny_model, release_kv_while_training=True, **fields)


def test_oneoff_is_exactly_one_version_stale(tmp_path, tiny_model):
    result = run(config(tmp_path, tiny_model, mode="oneoff", total_steps=3))
    assert [h["rollout/staleness_max"] for h in result.history] == [0, 1, 1]


def test_resume_continues_version_numbering(tmp_path, tiny_model):
    first = run(config(tmp_path, tiny_model, mode="sync", total_steps=2, checkpoint_every=1))
    assert first.version == 2
    second = run(config(tmp_path, tiny_model, mode="sync", total_steps=4, resume=True))
    assert second.version == 4 and second.steps == 2


def test_config_json_records_the_resolved_config(tmp_path, tiny_model):
    result = run(config(tmp_path, tiny_model, mode="sync", total_steps=1, seed=3, device="cpu", dtype="bfloat16"))
    recorded = json.loads((tmp_path / "t" / "config.json").read_text())
    assert (recorded["device"], recorded["trainer"]["device"], recorded["trainer"]["dtype"]) == ("cpu", "cpu", "bfloat16")
    assert result.devices["trainer"] == {"device": "cpu", "dtype": "bfloat16"}  # the setting took effect there
    assert recorded["trainer"]["model_path"] == recorded["engine"]["model"] == tiny_model
    assert recorded["trainer"]["seed"] == recorded["rollout"]["seed"] == recorded["engine"]["seed"] == 3
    assert recorded["buffer"] == dict(mode="sync", alpha=0, group_size=4, capacity=32, max_outstanding_groups=0)
    assert result.steps == 1


def test_process_actors_and_tensorboard(tmp_path, tiny_model):
    result = run(config(tmp_path, tiny_model, mode="async", total_steps=2, actor_mode="process",
                        eval_every=1))
    assert result.version == 2 and 0.0 <= result.final_success["FrozenLake"] <= 1.0
    acc = EventAccumulator(result.run_dir)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for needed in ("losses/policy", "rollout/reward_mean", "system/train_s", "system/get_batch_wait_s",
                   "system/weight_push_s", "charts/eval_success/FrozenLake", "rollout/routing/requests",
                   "rollout/routing/spills"):
        assert needed in tags, (needed, tags)


def test_split_cores_pins_trainer_and_rollout(tmp_path, tiny_model, monkeypatch):
    """trainer_cpus/rollout_cpus: the trainer process on one core, this process on the other while it runs."""
    import os
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    before = os.sched_getaffinity(0)
    seen = {}

    train = TrainSteps.train

    async def probe(self, batch, extra=None):
        seen["rollout"] = os.sched_getaffinity(0)
        seen["trainer"] = await self.parts.actors.trainer.call("placement")
        return await train(self, batch, extra)

    monkeypatch.setattr(TrainSteps, "train", probe)
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=1, trainer_actor_mode="process",
                 trainer_cpus=(cores[0],), rollout_cpus=(cores[1],))
    result = asyncio.run(Coordinator(cfg, [FROZEN]).run())
    assert result.version == 1
    assert seen["rollout"] == {cores[1]}
    assert seen["trainer"]["cpus"] == [cores[0]] and seen["trainer"]["pid"] != os.getpid()
    assert os.sched_getaffinity(0) == before  # restored after the run


def test_split_cores_config_errors(tmp_path, tiny_model):
    from rollart.config import ConfigError
    with pytest.raises(ConfigError, match="trainer_actor_mode=process"):
        config(tmp_path, tiny_model, trainer_cpus=(0,))
    with pytest.raises(ConfigError, match="overlap"):
        config(tmp_path, tiny_model, trainer_actor_mode="process", trainer_cpus=(0,), rollout_cpus=(0, 1))


def test_worker_stats_and_the_simulation_in_control_warning(tmp_path, tiny_model, caplog):
    """RunResult.workers carries each inference worker's counters; with simulated hardware whose time is
    far below the real compute (a tiny time scale) the run warns that the CPU set the workers' speed."""
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=1, simulate_hardware=True, sim_time_scale=1e-4,
                 hw_classes=("H800",))
    with caplog.at_level("WARNING", logger="rollart.pipeline"):
        result = run(cfg)
    assert result.workers and all(w["hw_class"] == "H800" and w["steps"] > 0 and w["simulated_scaled_seconds"] > 0
                                  for w in result.workers.values())
    assert "so this CPU, not the simulated hardware, set much of its speed" in caplog.text


def test_strict_affinity_keeps_a_task_on_its_class(tmp_path, tiny_model):
    """proxy.hw_affinity routes every FrozenLake request to the H800 worker; the idle H20 serves none (spill off)."""
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=1, num_inference_workers=2,
                 hw_classes=("H800", "H20"), proxy=ProxyConfig(hw_affinity={"FrozenLake": "H800"}))
    result = run(cfg)
    by_class = {w["hw_class"]: w["requests"] for w in result.workers.values()}
    last = result.history[-1]
    assert by_class["H800"] == last["rollout/routing/requests"] > 0 and by_class["H20"] == 0
    assert last["rollout/routing/spills"] == 0
    with pytest.raises(Exception, match="spill_ratio must be 0"):
        config(tmp_path, tiny_model, proxy=ProxyConfig(spill_ratio=0.5))


@pytest.mark.parametrize("consecutive", [1, 2, 3])
def test_stop_at_success_must_hold_on_consecutive_evaluations(tmp_path, tiny_model, consecutive):
    # a target of 0 is met by every evaluation, so the run stops at the first step where `consecutive` are done
    result = run(config(tmp_path, tiny_model, mode="sync", total_steps=10, eval_every=1, stop_at_success=0.0,
                        stop_consecutive=consecutive))
    assert result.steps == consecutive and [step for step, _ in result.evals] == list(range(1, consecutive + 1))
    assert result.final_success == result.evals[-1][1]  # the run ends with the weights evaluated last


def scripted_scores(monkeypatch, scores):
    """The real loop with evaluation scores read from a script, so the stop logic meets a chosen sequence."""
    scores = list(scores)

    async def scripted(manager, tasks, episodes, seed):
        return {"FrozenLake": scores.pop(0), "mean": 0.0}

    monkeypatch.setattr(evaluate_module, "evaluate", scripted)


def test_async_run_ends_only_on_weights_that_meet_the_target(tmp_path, tiny_model, monkeypatch):
    # the target holds at step 1 while step 2 trains; step 2's weights (the final ones) miss it, so training goes
    # on; it holds again at step 3, and step 4's weights, evaluated in turn, hold it: the run ends there
    cfg = config(tmp_path, tiny_model, mode="async", total_steps=10, eval_every=1, stop_at_success=0.9,
                 stop_consecutive=1)
    scripted_scores(monkeypatch, [1.0, 0.0, 1.0, 1.0])
    result = asyncio.run(Coordinator(cfg, [FROZEN]).run())
    assert [step for step, _ in result.evals] == [1, 2, 3, 4]
    assert result.steps == result.version == 4 and result.final_success["FrozenLake"] == 1.0
