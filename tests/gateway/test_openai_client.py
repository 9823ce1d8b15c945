"""The real openai client against the real gateway over HTTP: chat and completions, streaming and not, logprobs,
a tool call round trip, unknown keys refused, recorded token ids equal to the engine's, forks and the loss mask."""
import json

import openai
import pytest

from rollart.types import SamplingParams

pytestmark = pytest.mark.timeout(120)

LOOKUP = [{"type": "function", "function": {"name": "lookup", "description": "read the secret",
                                            "parameters": {"type": "object", "properties": {"key": {}}}}}]


def client(gw, key):
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


async def test_chat_records_the_engines_tokens_and_logprobs(served):
    gw, proxy, worker, tok = served
    s = gw.open("t0", sampling=SamplingParams(temperature=1.0, max_tokens=8), seed=1)
    r = await client(gw, s.api_key).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Reply with one letter."}], logprobs=True, max_tokens=6)
    call = s.calls[0]
    raw = r.model_extra["rollart"]
    assert raw["completion_token_ids"] == call.completion_ids and 1 <= len(call.completion_ids) <= 6
    assert raw["prompt_token_ids"] == call.prompt_ids == tok.apply_chat_template(
        [{"role": "user", "content": "Reply with one letter."}], add_generation_prompt=True)["input_ids"]
    assert [c.logprob for c in r.choices[0].logprobs.content] == call.logprobs
    assert all(lp <= 0 for lp in call.logprobs) and call.versions == [0] * len(call.completion_ids)
    # the engine, asked the same thing with the same seed, generates the same tokens
    again = await proxy.generate("check", call.prompt_ids, _same_params(s, 0, 6))
    assert again.token_ids == call.completion_ids and again.logprobs == pytest.approx(call.logprobs, abs=1e-5)
    assert r.usage.completion_tokens == len(call.completion_ids)


def _same_params(session, call_index, max_tokens):
    import dataclasses
    import zlib
    p = dataclasses.replace(session.sampling, max_tokens=max_tokens, stop_token_ids=session.chat.stop_token_ids)
    return dataclasses.replace(p, seed=zlib.crc32(f"{session.seed}/{session.trajectory_id}/{call_index}".encode()))


async def test_streaming_chat_and_completions(served):
    gw, _, _, tok = served
    s = gw.open("t1", sampling=SamplingParams(temperature=1.0, max_tokens=8), seed=2)
    c = client(gw, s.api_key)
    stream = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                             stream=True, logprobs=True)
    chunks = [ch async for ch in stream]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert text == tok.decode([t for t in s.calls[0].completion_ids if t not in s.chat.stop_token_ids],
                              skip_special_tokens=True).strip()
    lps = [lp.logprob for ch in chunks if ch.choices and ch.choices[0].logprobs for lp in ch.choices[0].logprobs.content]
    assert lps == s.calls[0].logprobs
    r = await c.completions.create(model="m", prompt="What is 2 + 3?", max_tokens=5, logprobs=1)
    assert r.choices[0].logprobs.token_logprobs == s.calls[1].logprobs
    assert r.choices[0].text == tok.decode(s.calls[1].completion_ids, skip_special_tokens=True)
    pieces = [ch.choices[0].text async for ch in await c.completions.create(
        model="m", prompt=[5, 6, 7, 8], max_tokens=4, stream=True)]
    assert "".join(pieces) == tok.decode(s.calls[2].completion_ids, skip_special_tokens=True)
    assert s.calls[2].prompt_ids == [5, 6, 7, 8]


async def test_unknown_key_is_refused_and_other_ways_to_name_the_trajectory(served):
    gw, _, _, _ = served
    with pytest.raises(openai.AuthenticationError, match="unknown API key"):
        await client(gw, "nope").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    s = gw.open("t2", sampling=SamplingParams(max_tokens=2))
    c = client(gw, "a-fixed-key-the-harness-insists-on")
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], user=s.api_key)
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "y"}],
                                    extra_headers={"X-Rollart-Trajectory": s.api_key})
    assert len(s.calls) == 2
    gw.end(s)
    with pytest.raises(openai.AuthenticationError, match="has ended"):
        await client(gw, s.api_key).chat.completions.create(model="m", messages=[{"role": "user", "content": "z"}])


class ForcedOutput:
    """A proxy whose generations are the given texts (tokenised), to drive a tool call deterministically."""

    def __init__(self, proxy, tok, texts):
        self.proxy, self.tok, self.texts = proxy, tok, list(texts)

    async def generate(self, tid, prompt, params, task):
        out = await self.proxy.generate(tid, prompt, params, task)
        out.token_ids = self.tok.encode(self.texts.pop(0), add_special_tokens=False) + [params.stop_token_ids[0]]
        out.logprobs, out.versions = [-0.5] * len(out.token_ids), [0] * len(out.token_ids)
        return out


async def test_tool_call_round_trip_extends_the_sequence_token_for_token(served):
    gw, proxy, _, tok = served
    gw.proxy = ForcedOutput(proxy, tok, ['<tool>lookup {"key": "a"}</tool>', "The secret is 7"])
    s = gw.open("t3", sampling=SamplingParams(max_tokens=4))
    c = client(gw, s.api_key)
    messages = [{"role": "user", "content": "What is the secret?"}]
    r = await c.chat.completions.create(model="m", messages=messages, tools=LOOKUP)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.tool_calls[0].function.name == "lookup"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"key": "a"}
    messages += [msg.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "7"}]
    r2 = await c.chat.completions.create(model="m", messages=messages, tools=LOOKUP)
    assert r2.choices[0].message.content == "The secret is 7"
    first, second = s.calls
    # the second prompt starts with the first prompt + the model's exact tokens: no re-tokenisation, no fork
    assert second.prompt_ids[:len(first.prompt_ids) + len(first.completion_ids)] == \
        first.prompt_ids + first.completion_ids
    assert "Tools: lookup(key)" in tok.decode(first.prompt_ids)
    assert "<|im_start|>tool\n7<|im_end|>" in tok.decode(second.prompt_ids)
    assert s.record.forks == 0
    seg = s.record.segments[0]
    model = [t for t, m in zip(seg.token_ids, seg.loss_mask) if m]
    assert model == first.completion_ids + second.completion_ids  # loss mask = model tokens only
    assert seg.token_ids == second.prompt_ids + second.completion_ids


async def test_a_prompt_that_drops_history_forks_a_new_segment(served):
    gw, _, _, tok = served
    s = gw.open("t4", sampling=SamplingParams(max_tokens=3), seed=4)
    c = client(gw, s.api_key)
    r = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "one"}])
    await c.chat.completions.create(model="m", messages=[
        {"role": "user", "content": "one"}, {"role": "assistant", "content": r.choices[0].message.content},
        {"role": "user", "content": "two"}])
    assert s.record.forks == 0
    await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "summary: two"}])
    assert s.record.forks == 1 and [call.segment for call in s.calls] == [0, 0, 1]
    from rollart.types import Trajectory
    traj = Trajectory("t4", "g", "agent")
    s.record.fill(traj)
    assert traj.token_ids == s.calls[2].prompt_ids + s.calls[2].completion_ids
    assert [t for t, m in zip(traj.token_ids, traj.loss_mask) if m] == s.calls[2].completion_ids
    old = traj.info["segments"][0]
    assert [t for t, m in zip(old["token_ids"], old["loss_mask"]) if m] == \
        s.calls[0].completion_ids + s.calls[1].completion_ids


PEEK = [{"type": "function", "function": {"name": "peek", "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_forced_tool_without_arguments_is_written_by_the_gateway_and_trained_as_context(served, stream):
    gw, _, _, tok = served
    s = gw.open(f"t5{stream}", sampling=SamplingParams(max_tokens=3), seed=5)
    c = client(gw, s.api_key)
    messages = [{"role": "user", "content": "What is the secret?"}]
    forced = {"type": "function", "function": {"name": "peek"}}
    r = await c.chat.completions.create(model="m", messages=messages, tools=PEEK, tool_choice=forced, stream=stream)
    if stream:
        chunks = [ch async for ch in r]
        calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        call_id, name, args = calls[0].id, calls[0].function.name, calls[0].function.arguments
        msg = {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function",
                                                    "function": {"name": name, "arguments": args}}]}
    else:
        assert r.choices[0].finish_reason == "tool_calls" and r.usage.completion_tokens == 0
        tc = r.choices[0].message.tool_calls[0]
        call_id, name, args = tc.id, tc.function.name, tc.function.arguments
        msg = r.choices[0].message.model_dump(exclude_none=True)
    assert (name, json.loads(args)) == ("peek", {}) and s.calls == []  # the model sampled nothing
    messages += [msg, {"role": "tool", "tool_call_id": call_id, "content": "7"}]
    await c.chat.completions.create(model="m", messages=messages, tools=PEEK, tool_choice="auto")
    only = s.calls[0]
    assert len(s.calls) == 1 and "<tool>peek {}</tool>" in tok.decode(only.prompt_ids)  # context, mask 0
    seg = s.record.segments[0]
    assert [t for t, m in zip(seg.token_ids, seg.loss_mask) if m] == only.completion_ids


@pytest.mark.parametrize("tools, choice, says", [
    (LOOKUP, {"type": "function", "function": {"name": "lookup"}}, "takes arguments"),
    (PEEK, {"type": "function", "function": {"name": "poke"}}, "not among the request's tools"),
    (PEEK + LOOKUP, "required", "leaves the choice to the model"),
    (PEEK, "always", "tool_choice must be"),
])
async def test_tool_choices_the_gateway_cannot_honour_are_refused_in_one_line(served, tools, choice, says):
    gw, _, _, _ = served
    s = gw.open("t6", sampling=SamplingParams(max_tokens=2))
    with pytest.raises(openai.BadRequestError, match=says):
        await client(gw, s.api_key).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], tools=tools, tool_choice=choice)
    assert s.calls == []
