"""Capacity-limited LLM stand-in: step-time model (flat, then linear in the batch), shared decode loop, cancellation."""
import asyncio

import pytest

from rollart.config import ConfigError
from rollart.rollout.scripted import ByteTokenizer, ScriptedPolicy
from rollart.sim.decode import CapacityLimitedLLM, DecodeCapacity


def test_step_time_is_flat_until_saturation_then_throughput_bound():
    cap = DecodeCapacity(min_step_s=0.01, saturation=4, tokens_per_turn=3)
    assert [cap.step_s(n) for n in (1, 2, 4)] == [0.01, 0.01, 0.01]
    assert cap.step_s(8) == pytest.approx(0.02) and cap.step_s(12) == pytest.approx(0.03)
    for n in (4, 8, 100):  # above saturation the engine's token rate is fixed
        assert n / cap.step_s(n) == pytest.approx(cap.max_tokens_per_s) == pytest.approx(400)
    assert cap.turn_s(8) == pytest.approx(3 * 0.02)
    with pytest.raises(ConfigError):
        DecodeCapacity(saturation=0)


def test_concurrent_requests_share_decode_steps_and_cancelled_ones_leave_the_batch():
    async def main():
        llm = CapacityLimitedLLM(None, DecodeCapacity(min_step_s=0.001, saturation=2, tokens_per_turn=4))
        await asyncio.gather(*(llm.decode(4) for _ in range(3)))
        assert llm.batch_sizes == [3, 3, 3, 3]  # one token each per step, decoded together
        llm.batch_sizes.clear()
        victim = asyncio.create_task(llm.decode(6))
        keep = asyncio.create_task(llm.decode(6))
        while llm.steps < 2:
            await asyncio.sleep(0)
        victim.cancel()
        await keep
        assert victim.cancelled()
        assert llm.batch_sizes[:2] == [2, 2] and set(llm.batch_sizes[3:]) == {1} and llm.steps == 6
    asyncio.run(main())


def test_generate_waits_its_turn_then_answers_as_the_wrapped_policy():
    async def main():
        tok = ByteTokenizer()
        llm = CapacityLimitedLLM(ScriptedPolicy(tok, lambda tid, obs: "D"),
                                 DecodeCapacity(min_step_s=0.001, tokens_per_turn=5))
        prompt = tok.apply_chat_template([{"role": "user", "content": "grid"}], tokenize=True,
                                         add_generation_prompt=True)
        out = await llm.generate("t0", prompt)
        assert out.text == "D" and llm.steps == 5
    asyncio.run(main())
