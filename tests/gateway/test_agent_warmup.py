"""Format warm-up of agent tasks: the recipe's OpenAI-client agent run through the real gateway against random
replies; the rows train only the replies, in the gateway's own token sequences; the warmed model answers a digit
after peeking, evenly, whatever the secret (the format, no policy); a task without sample_reply is refused."""
import asyncio
import gc

import numpy as np
import pytest
import torch

from rollart.gateway.agent_task import AgentTask
from rollart.gateway.warmup import AgentTranscripts
from rollart.models import load_model, load_tokenizer
from rollart.tools.format_warmup import WarmupError, format_warmup
from rollart.tools.make_tiny_model import make_tiny_model

from recipes import grpo_agent
from recipes.grpo_agent import SECRETS, TASK


def digit_ids(tok):
    return [tok.encode(d, add_special_tokens=False)[0] for d in SECRETS]


def answer_rows(tok, n, seed=0):
    """(ids before the answer, the secret) of ``n`` random-reply runs (each peeks, then answers)."""
    rows = []
    transcripts = AgentTranscripts(TASK, tok, np.random.default_rng(seed))
    try:
        while len(rows) < n:
            [(ids, mask)] = transcripts.episode()
            answer = max(i for i, m in enumerate(mask) if m and ids[i] in digit_ids(tok))
            secret = tok.decode(ids[:answer]).rsplit("<|im_start|>tool\n", 1)[1][:1]
            rows.append((ids[:answer], secret))
    finally:
        transcripts.close()
    return rows


@pytest.mark.parametrize("force_peek", [True, False])
def test_rows_train_the_replies_only_in_the_gateway_sequence(tmp_path, monkeypatch, force_peek):
    """The recipe's agent forces its peek (the gateway writes that call: context, not a reply) or leaves it to the
    model (then the model's "@" is a reply, trained)."""
    monkeypatch.setattr(grpo_agent, "FORCE_PEEK", force_peek)
    folder = make_tiny_model(tmp_path / "m", seed=0)
    tok = load_tokenizer(folder)
    replies = []

    def sample(rng, call):
        replies.append(TASK.sample_reply(rng, call))
        return replies[-1]

    task = AgentTask("peek", TASK.agent, make_task=TASK.make_task, max_new_tokens=8, tool_syntax=TASK.tool_syntax,
                     max_calls=2, sample_reply=sample)
    transcripts = AgentTranscripts(task, tok, np.random.default_rng(1))
    try:
        for _ in range(6):
            start = len(replies)
            [(ids, mask)] = transcripts.episode()
            trained = [t for t, m in zip(ids, mask) if m]
            said = tok.decode(trained, skip_special_tokens=True)
            assert said == "".join(replies[start:]), (said, replies[start:])  # exactly the replies, nothing else
            text = tok.decode(ids)
            assert text.startswith("<|im_start|>system\nTools: peek()\n")  # the gateway's tool prompt
            assert "<|im_start|>user\nWhat is the secret?<|im_end|>" in text  # the agent's one message
            if force_peek:
                assert len(replies) - start == 1 and "@peek {}" in text  # the gateway's call, then the answer
            else:
                assert replies[start] == "@" and len(replies) - start == 2  # peeked, then answered
            assert "<|im_start|>tool\n" in text  # the tool's result: context (mask 0) before the answer
    finally:
        transcripts.close()
    assert gc.isenabled()  # automatic collection is back on


def test_warmed_model_answers_a_digit_evenly_whatever_the_secret(tmp_path):
    folder = make_tiny_model(tmp_path / "m", seed=0)  # the recipe's model
    tok = load_tokenizer(folder)
    rows = answer_rows(tok, 20)
    result = format_warmup(folder, [TASK], steps=60, seed=0, threads=1)
    model = load_model(folder).eval()
    digits = digit_ids(tok)
    probs, right = [], []
    with torch.no_grad():
        for ids, secret in rows:
            p = torch.softmax(model(torch.tensor([ids]))[0, -1].float(), -1)[digits]
            probs.append(p)
            right.append(float(p[SECRETS.index(secret)] / p.sum()))
    probs = torch.stack(probs)
    assert probs.sum(-1).min() > 0.8, probs.sum(-1)  # the format: a digit after peeking
    share = probs / probs.sum(-1, keepdim=True)
    assert share.max() < 0.4, share.max()  # no digit preferred
    assert np.mean(right) < 0.2, right  # and no copying of the secret: that is the policy RL must learn
    assert result.last_loss < result.first_loss


def test_a_run_warms_up_its_agent_task_from_inside_its_event_loop(tmp_path):
    """As Coordinator.run builds its model: from a coroutine, so the warm-up's gateway needs a loop of its own."""
    from rollart.pipeline import PipelineConfig
    from rollart.pipeline.prepare import ensure_model

    async def build():
        return ensure_model(PipelineConfig(logdir=str(tmp_path), run_name="agent", warmup_steps=2, quiet=True), [TASK])

    folder = asyncio.run(build())
    assert '"steps": 2' in (tmp_path / "agent" / "init_model" / "warmup.json").read_text()
    assert load_model(folder) is not None


def test_agent_task_without_sample_reply_is_refused(tmp_path):
    folder = make_tiny_model(tmp_path / "m", seed=0)
    task = AgentTask("nosampler", TASK.agent, make_task=TASK.make_task)
    with pytest.raises(WarmupError, match="needs AgentTask\\(sample_reply=...\\)"):
        format_warmup(folder, [task], steps=1)
