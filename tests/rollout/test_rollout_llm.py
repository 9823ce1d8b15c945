"""Rollout on the real stack: tiny model + torch engine InferenceWorker + LLMProxy + its tokenizer.
Token-in/token-out shows as prefix-cache hits; the model's tokens, logprobs and versions are recorded;
cancelled extras leave no request running."""
import asyncio

import pytest

import envs  # noqa: F401  (registers the rollart/* envs)

from rollart.rollout.buffer import BufferConfig, SampleBuffer
from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_manager import EnvManager, TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.messages import GetStats


@pytest.fixture
async def stack(tiny_model_dir):
    from rollart.inference.worker import InferenceWorker
    from rollart.models import load_tokenizer
    from rollart.actors import LocalHandle
    from rollart.rollout.proxy import LLMProxy

    worker = InferenceWorker(dict(model=tiny_model_dir, num_kv_blocks=512, max_num_seqs=32), name="cpu-0")
    proxy = LLMProxy([("cpu-0", "cpu", LocalHandle(worker, worker.name))])
    yield proxy, worker, load_tokenizer(tiny_model_dir)
    await worker.shutdown()


@pytest.mark.timeout(180)
async def test_frozenlake_groups_on_the_real_model(stack):
    proxy, worker, tok = stack
    buf = SampleBuffer(BufferConfig(group_size=4, capacity=16))
    manager = EnvManager(proxy, tok, EnvPool.inprocess(), gate=buf)
    task = TaskSpec("frozenlake", "rollart/FrozenLake-v0", max_new_tokens=4, temperature=1.0)
    sched = RolloutScheduler([task], manager, SchedulerConfig(group_size=4, extra_envs_per_group=2, seed=0),
                             buffer=buf)
    async with asyncio.timeout(150):
        groups = await sched.collect_batch(2)
    trajs = [t for g in groups for t in g]
    assert len(trajs) == 8 and all(t.status == "done" for t in trajs)
    for t in trajs:
        model = [i for i, m in enumerate(t.loss_mask) if m]
        assert model and all(t.logprobs[i] <= 0.0 and t.versions[i] == 0 for i in model)
        assert t.start_version == 0 and t.num_turns >= 1
        assert tok.decode(t.token_ids).startswith("<|im_start|>system\nMove to G avoiding H.")
    multi = [t for t in trajs if t.num_turns >= 2]
    assert multi  # an untrained model rarely ends FrozenLake in one move
    # later turns re-use the previous turn's KV: the prompt extends it token for token
    assert sum(t.info["cached_tokens"] for t in multi) > 0
    assert not any(proxy._inflight.get(t) for t in list(proxy._inflight))  # extras left nothing running
    assert (await worker.get_stats(GetStats()))["requests"] >= sum(t.num_turns for t in trajs)


@pytest.mark.timeout(120)
async def test_min_new_tokens_fixes_every_turns_length(stack):
    """min_new_tokens = max_new_tokens: each model turn is exactly that long, stop tokens included."""
    proxy, worker, tok = stack
    manager = EnvManager(proxy, tok, EnvPool.inprocess())
    task = TaskSpec("math", "rollart/MathTool-v0", max_new_tokens=6, min_new_tokens=6, max_turns=3)
    async with asyncio.timeout(100):
        trajs = [await manager.run(task, f"t{i}", f"g{i}", seed=i) for i in range(3)]
    for t in trajs:
        assert t.status == "done" and t.num_turns >= 1
        runs, n = [], 0
        for m in t.loss_mask + [0]:
            if m:
                n += 1
            elif n:
                runs, n = runs + [n], 0
        assert runs == [6] * t.num_turns
    with pytest.raises(ValueError, match="min_new_tokens"):
        TaskSpec("x", "rollart/MathTool-v0", max_new_tokens=4, min_new_tokens=5)
