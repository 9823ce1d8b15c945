"""ProfiledSpeedEngine on the tiny torch engine behind a real EngineLoop: each request returns its real tokens once
its turn of the paper's task is done on the emulated engine (decode-heavy turns faster on H20, prefill-heavy ones
on H800), a short turn is not held back by a long one beside it, a real output later than its turn is counted
late, and aborts and unprofiled tasks are served."""
import asyncio
import time

import pytest

from rollart.emulation import PAPER_TASKS
from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.hardware import SpeedModel, SpeedModelConfig, StepWork
from rollart.inference.engine_loop import EngineLoop
from rollart.sim.engine_profiled import ProfiledSpeedEngine
from rollart.types import GenerateRequest

GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
PROFILES = {"Lake": "frozenlake", "Math": "math"}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3))


def _engine(tiny_model, hw="H800", scale=0.01, **kw):
    inner = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=256, seed=0))
    return ProfiledSpeedEngine(inner, dict(hw_class=hw, time_scale=scale, task_profiles=PROFILES, **kw))


async def _generate(engine, requests, stagger_s=0.0):
    """Each (id, task, trajectory) request through a real EngineLoop, the i-th sent ``i * stagger_s`` after the first;
    id -> (result, wall seconds)."""
    loop = EngineLoop(engine, "w")

    async def one(rid, task, traj):
        await asyncio.sleep(stagger_s * [r[0] for r in requests].index(rid))
        t0 = time.perf_counter()
        out = await loop.generate(GenerateRequest(rid, [5, 6, 7, 8], GREEDY, trajectory_id=traj, task=task))
        return rid, (out, time.perf_counter() - t0)
    try:
        return dict(await asyncio.gather(*(one(*r) for r in requests)))
    finally:
        await loop.close()


def test_a_turn_lasts_what_the_papers_task_takes_and_returns_the_real_tokens(tiny_model):
    engine = _engine(tiny_model, scale=0.01)
    got = asyncio.run(_generate(engine, [("m#0", "Math", "m")]))
    out, wall = got["m#0"]
    ref = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64, seed=0))
    ref.add_request(GenerateRequest("r", [5, 6, 7, 8], GREEDY))
    while ref.has_unfinished_requests():
        expected = ref.step()
    assert out.token_ids == expected[0].token_ids  # the real engine's tokens
    s = engine.seconds()
    low, high = PAPER_TASKS["math"].response_tokens
    assert low <= s["emulated_decode_tokens"] <= high and s["emulated_prefill_tokens"] == 300  # the first turn
    model = SpeedModel(hw_class="H800")
    decode_step = model.step_seconds(StepWork(decode_seqs=1, decode_context_tokens=300))
    assert s["simulated_seconds"] >= s["emulated_decode_tokens"] * decode_step * 0.99  # every token a step
    assert wall >= 0.99 * s["simulated_scaled_seconds"] and s["late_requests"] == 0
    assert wall <= s["simulated_scaled_seconds"] + 0.25  # held for its turn, not much beyond it


def test_a_profiled_turn_is_timed_by_its_profile_whatever_the_token_scale(tiny_model):
    seconds = []
    for token_scale in (1.0, 27.0):  # token_scale stretches unprofiled requests only
        engine = _engine(tiny_model, scale=0.0001, token_scale=token_scale)
        asyncio.run(_generate(engine, [("m#0", "Math", "m")]))
        seconds.append(engine.seconds()["simulated_seconds"])
    # equal up to where wall-clock ticks split a decode stretch (ppm); a token scale of 27 would multiply it
    assert seconds[0] == pytest.approx(seconds[1], rel=1e-3)


def test_decode_heavy_turns_are_faster_on_h20_and_prefill_heavy_ones_on_h800(tiny_model):
    emulated = {}
    for hw in ("H800", "H20"):
        for task, traj in (("Math", "m"), ("Lake", "l")):
            engine = _engine(tiny_model, hw=hw, scale=0.0001)  # the emulated times alone
            asyncio.run(_generate(engine, [(f"{traj}#{i}", task, traj) for i in range(1)]))
            emulated[hw, task] = engine.seconds()["simulated_seconds"]
    assert emulated["H20", "Math"] < emulated["H800", "Math"]
    assert emulated["H800", "Lake"] < emulated["H20", "Lake"]


@pytest.mark.parametrize("stagger_s", [0.0, 0.1])
def test_a_short_turn_is_not_held_back_by_a_long_one_on_the_same_engine(tiny_model, stagger_s):
    """Sent together, or the short one while the loop waits out the long one's emulated steps (the command wakes
    it, and the decode stretch under way ends at its next step)."""
    engine = _engine(tiny_model, scale=0.005)
    got = asyncio.run(_generate(engine, [("m#0", "Math", "m"), ("l#0", "Lake", "l")], stagger_s))
    (math_out, math_wall), (lake_out, lake_wall) = got["m#0"], got["l#0"]
    assert len(math_out.token_ids) == len(lake_out.token_ids) == 4  # the same real work
    assert math_wall > 0.05 + stagger_s  # the GEM-math turn (5,526 tokens at ~8 ms a step x 0.005) outlasts the send ...
    assert lake_wall < 0.2 * math_wall  # ... and a FrozenLake turn (<= 40 tokens) far below it


def test_a_later_turn_prefills_only_its_observation_on_the_cached_context(tiny_model):
    engine = _engine(tiny_model, scale=0.0001)
    asyncio.run(_generate(engine, [("l#0", "Lake", "l")]))
    asyncio.run(_generate(engine, [("l#1", "Lake", "l")]))
    assert engine.seconds()["emulated_prefill_tokens"] == 600 + 512
    engine.reset_prefix_cache()  # as new weights do: the next turn recomputes the whole context
    before = engine.seconds()["emulated_prefill_tokens"]
    asyncio.run(_generate(engine, [("l#2", "Lake", "l")]))
    assert engine.seconds()["emulated_prefill_tokens"] - before > 600 + 2 * 512


def test_with_task_turns_a_trajectorys_requests_carry_the_paper_trajectorys_work(tiny_model):
    """A stand-in of 8 turns for the paper's FrozenLake (30 turns on average): each request stands for 3.75 turns;
    GEM-game's one turn spread over a stand-in's 5: each request a fifth of its answer."""
    lake, game = PAPER_TASKS["frozenlake"], PAPER_TASKS["game"]
    engine = _engine(tiny_model, scale=1e-6, task_turns={"Lake": 8})
    asyncio.run(_generate(engine, [("l#0", "Lake", "l")]))
    asyncio.run(_generate(engine, [("l#1", "Lake", "l")]))
    s = engine.seconds()
    assert s["emulated_prefill_tokens"] == lake.prompt_tokens + round(2.75 * lake.obs_tokens) + round(3.75 * lake.obs_tokens)
    low, high = lake.response_tokens
    assert 2 * round(3.75 * low) <= s["emulated_decode_tokens"] <= 2 * round(3.75 * high)

    decoded = {}
    for turns in (1, 5):
        engine = ProfiledSpeedEngine(LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=256, seed=0)),
                                     dict(hw_class="H20", time_scale=1e-6, task_profiles={"Game": "game"},
                                          task_turns={"Game": turns}))
        for i in range(turns):
            asyncio.run(_generate(engine, [(f"g#{i}", "Game", "g")]))
        decoded[turns] = engine.seconds()["emulated_decode_tokens"]
        assert engine.seconds()["emulated_prefill_tokens"] == game.prompt_tokens  # no observations: one prompt
    assert game.response_tokens[0] <= decoded[1] <= game.response_tokens[1]
    assert game.response_tokens[0] * 0.9 <= decoded[5] <= game.response_tokens[1] * 1.1  # five fifths: one answer


def test_a_real_output_later_than_its_turn_is_counted_late(tiny_model):
    engine = _engine(tiny_model, scale=1e-7)  # the emulated turn takes microseconds: the real engine is later
    got = asyncio.run(_generate(engine, [("l#0", "Lake", "l"), ("x#0", "Other", "x")]))
    assert len(got["l#0"][0].token_ids) == 4 and len(got["x#0"][0].token_ids) == 4
    s = engine.seconds()
    assert s["late_requests"] >= 1 and s["late_seconds"] > 0


def test_an_unprofiled_task_is_timed_by_its_real_tokens_and_an_abort_ends_a_held_request(tiny_model):
    engine = _engine(tiny_model, scale=0.5, token_scale=10)  # 40 emulated decode steps: ~0.1 s here
    asyncio.run(_generate(engine, [("x#0", "Other", "x")]))
    s = engine.seconds()
    assert s["emulated_prefill_tokens"] == 40 and s["emulated_decode_tokens"] == 40  # 4 + 4 real tokens x 10

    async def abort_midway():
        engine = _engine(tiny_model, scale=0.05)  # a math turn takes seconds here
        loop = EngineLoop(engine, "w")
        task = asyncio.ensure_future(loop.generate(GenerateRequest("m#0", [5, 6], GREEDY, "m", task="Math")))
        await asyncio.sleep(0.3)  # the real tokens are done; the emulated turn is not
        assert loop.abort("m#0") is True
        out = await task
        await asyncio.sleep(0.05)
        assert out.finish_reason == "abort" and not engine.has_unfinished_requests()
        await loop.close()
    asyncio.run(abort_midway())


def test_a_worker_with_task_profiles_wraps_its_engine_in_the_profiled_one(tiny_model):
    from rollart.inference.worker import InferenceWorker
    w = InferenceWorker(dict(model=tiny_model, num_kv_blocks=64), hw_class="H20",
                        speed=SpeedModelConfig(hw_class="H20", task_profiles=PROFILES))
    assert isinstance(w.engine, ProfiledSpeedEngine) and w.engine.capabilities.paced
    assert "late_requests" in w.stats()


def test_a_prefill_step_under_way_runs_whole_when_another_request_arrives(tiny_model):
    engine = _engine(tiny_model, hw="H20", scale=1.0)  # a FrozenLake prompt's prefill: ~0.13 s on an H20
    got = asyncio.run(_generate(engine, [("l#0", "Lake", "l"), ("x#0", "Lake", "x")], stagger_s=0.04))
    model = SpeedModel(hw_class="H20")
    prefill = model.step_seconds(StepWork(prefill_tokens=600, prefill_context=300))
    decode = model.step_seconds(StepWork(decode_seqs=1, decode_context_tokens=600))
    # its whole prefill step, then one step holding the other's prefill, then the rest of its 15-token answer (cut
    # short at the arrival, its prefill would have ended at 0.04 s: ~0.27 s in all)
    assert got["l#0"][1] >= 2 * prefill + 10 * decode
