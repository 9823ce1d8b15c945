"""LLMEngine request handling: abort (idempotent), prefix-cache hits and LRU eviction, stop conditions, bad input."""
import pytest

from rollart.engine import EngineConfig, InvalidRequestError, LLMEngine, SamplingParams
from rollart.models import load_model
from rollart.types import GenerateRequest

from engine_helpers import greedy_reference, random_prompts

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


@pytest.fixture(scope="module")
def model(tiny_model):
    return load_model(tiny_model)


def _engine(path, **kw):
    kw.setdefault("num_kv_blocks", 128)
    return LLMEngine(EngineConfig(model=str(path), **kw))


def _run(engine):
    done = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            done[o.request_id] = o
    return done


def test_abort_running_waiting_finished_and_unknown(tiny_model, model):
    engine = _engine(tiny_model, max_num_seqs=2)
    prompts = random_prompts([10, 12, 14], seed=1)
    for i, p in enumerate(prompts):
        engine.add_request(GenerateRequest(f"r{i}", p, GREEDY))
    engine.step()                                   # r0, r1 running; r2 waiting (max_num_seqs=2)
    assert engine.abort_request("r0") is True       # running
    assert engine.abort_request("r0") is False      # twice: no-op
    assert engine.abort_request("nope") is False    # unknown
    done = _run(engine)
    assert set(done) == {"r1", "r2"}
    assert done["r2"].token_ids == greedy_reference(model, prompts[2], 16)[0]
    assert engine.abort_request("r1") is False      # finished
    engine.add_request(GenerateRequest("w", prompts[0], GREEDY))     # waiting, never scheduled
    assert engine.abort_request("w") is True and not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.num_blocks


def test_next_turn_reuses_history_blocks(tiny_model, model):
    engine = _engine(tiny_model)
    bs = engine.config.block_size
    turn1 = random_prompts([40], seed=2)[0]
    out1 = engine.generate([turn1], GREEDY)[0]
    assert out1.num_cached_tokens == 0
    history = turn1 + out1.token_ids                # the last sampled token's K/V was never computed
    turn2 = history + random_prompts([11], seed=3)[0]
    out2 = engine.generate([turn2], GREEDY)[0]
    assert out2.num_cached_tokens == (len(history) - 1) // bs * bs
    assert engine.stats().prefix_hit_tokens == out2.num_cached_tokens
    assert out2.token_ids == greedy_reference(model, turn2, 16)[0]  # cached K/V is the right K/V


def test_identical_concurrent_prompts_and_full_prompt_hit(tiny_model):
    engine = _engine(tiny_model, block_size=8)
    p = random_prompts([32], seed=4)[0]             # exactly 4 blocks
    first = engine.generate([p], GREEDY)[0]
    again = engine.generate([p], GREEDY)[0]
    assert again.num_cached_tokens == 24            # the last block is recomputed (its last token gives the logits)
    assert again.token_ids == first.token_ids


def test_lru_eviction_and_disabled_prefix_cache(tiny_model):
    engine = _engine(tiny_model, num_kv_blocks=12, block_size=16)
    a = random_prompts([60], seed=5)[0]
    engine.generate([a], GREEDY)
    assert engine.generate([a], GREEDY)[0].num_cached_tokens == 48  # 75 computed tokens: 4 full blocks, 3 usable
    # 150 + 16 tokens need 11 of the 12 blocks: the 7 never-used ones, then a's, tail first (LRU order)
    engine.generate(random_prompts([150], seed=6), GREEDY)
    assert engine.generate([a], GREEDY)[0].num_cached_tokens == 16  # only a's head block survived
    off = _engine(tiny_model, enable_prefix_caching=False)
    off.generate([a], GREEDY)
    assert off.generate([a], GREEDY)[0].num_cached_tokens == 0


def test_stop_token_stop_string_eos_and_length(tiny_model):
    """Each stop condition cuts the same seeded sample at the right token (the stopping token is kept)."""
    engine = _engine(tiny_model)
    p = random_prompts([20], seed=7)[0]

    def run(**kw):
        kw = {"temperature": 1.0, "seed": 5, "max_tokens": 24, "ignore_eos": True} | kw
        return engine.generate([p], SamplingParams(**kw))[0]

    full = run()
    ref = full.token_ids
    assert len(ref) == 24 and full.finish_reason == "length"
    k = next(i for i in range(3, 24) if ref[i] not in ref[:i])          # a token's first occurrence
    out = run(stop_token_ids=[ref[k]])
    assert out.token_ids == ref[:k + 1] and out.finish_reason == "stop"
    # stop string: the text of a few tokens of the full output (from token 4), whole characters (byte tokens can
    # split one, and the engine's text holds a split character back until it is complete), that appears in the
    # output's text once its last token j is out and not before: the run stops at token j
    tok = engine.tokenizer

    def window_ends_at(i, j):
        text, target = tok.decode(ref[:j]), tok.decode(ref[i:j])
        return (len(target) >= 2 and "\ufffd" not in target and not text.endswith("\ufffd") and target in text
                and target not in tok.decode(ref[:j - 1]))
    i, j = next((i, j) for i in range(4, 22) for j in range(i + 1, min(i + 5, 25)) if window_ends_at(i, j))
    target = tok.decode(ref[i:j])
    out = run(stop=[target])
    n = len(out.token_ids)
    assert out.finish_reason == "stop" and out.token_ids == ref[:n] and n == j
    assert target in tok.decode(ref[:n]) and target not in tok.decode(ref[:n - 1])
    # EOS: make ref[k] the end-of-sequence token; ignore_eos keeps going
    engine.eos_token_ids = {ref[k]}
    assert run(ignore_eos=False).token_ids == ref[:k + 1]
    assert run().token_ids == ref
    # length: max_tokens, and the context limit
    assert run(max_tokens=5).token_ids == ref[:5]
    short = _engine(tiny_model, max_model_len=26)
    out = short.generate([p], SamplingParams(temperature=1.0, seed=5, max_tokens=24, ignore_eos=True))[0]
    assert out.token_ids == ref[:6] and out.finish_reason == "length"
    # min_tokens: no stop condition ends generation before it; the tokens are the same sample
    engine.eos_token_ids = set()
    out = run(stop_token_ids=[ref[k]], min_tokens=k + 1)
    assert out.token_ids == ref[:k + 1] and out.finish_reason == "stop"  # stopping at min_tokens is allowed
    later = next((i for i in range(k + 1, 24) if ref[i] == ref[k]), None)
    out = run(stop_token_ids=[ref[k]], min_tokens=k + 2)
    assert out.token_ids == ref[:later + 1 if later is not None else 24]
    assert run(stop=[target], min_tokens=12).token_ids[:12] == ref[:12]
    with pytest.raises(InvalidRequestError, match="min_tokens"):
        SamplingParams(max_tokens=4, min_tokens=5)


def test_bad_requests_get_clear_errors_while_others_finish(tiny_model, model):
    engine = _engine(tiny_model, max_model_len=64)
    good = random_prompts([10, 30], seed=8)
    engine.add_request(GenerateRequest("ok0", good[0], GREEDY))
    engine.step()
    bad = [("empty", [], GREEDY, "empty prompt"),
           ("long", list(range(3, 70)), GREEDY, "max_model_len"),
           ("vocab", [5, 99999], GREEDY, "outside the vocabulary"),
           ("dup", good[1], GREEDY, None)]
    for rid, prompt, sp, msg in bad:
        rid = "ok0" if rid == "dup" else rid
        with pytest.raises(InvalidRequestError, match=msg or "already in flight"):
            engine.add_request(GenerateRequest(rid, prompt, sp))
    engine.add_request(GenerateRequest("ok1", good[1], GREEDY))
    done = _run(engine)
    assert set(done) == {"ok0", "ok1"}
    for i, p in enumerate(good):
        assert done[f"ok{i}"].token_ids == greedy_reference(model, p, 16)[0]


class _BrokenDecode:
    """A tokenizer that fails to decode one token: only the request using stop strings trips on it."""

    def __init__(self, tok, bad):
        self.tok, self.bad = tok, bad
        self.eos_token_id = tok.eos_token_id

    def decode(self, ids, **kw):
        if self.bad in ids:
            raise RuntimeError("cannot decode")
        return self.tok.decode(ids, **kw)


def test_failure_inside_one_request_is_reported_and_others_finish(tiny_model, model):
    from rollart.models import load_tokenizer
    p = random_prompts([12, 20], seed=9)
    first = greedy_reference(model, p[0], 16)[0][0]
    engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=64),
                       tokenizer=_BrokenDecode(load_tokenizer(tiny_model), bad=first))
    sp = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    engine.add_request(GenerateRequest("bad", p[0], SamplingParams(temperature=0, max_tokens=16, stop=["zzz"],
                                                                   ignore_eos=True)))
    engine.add_request(GenerateRequest("good", p[1], sp))
    done = _run(engine)
    assert done["bad"].finish_reason == "error" and "cannot decode" in done["bad"].error
    assert done["good"].error == "" and done["good"].token_ids == greedy_reference(model, p[1], 16)[0]
