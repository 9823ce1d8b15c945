"""Train an existing OpenAI-client agent through the gateway: "peek at the secret digit, then say it", on CPU.

    python -m recipes.grpo_agent                      # 80 steps, ~6.5 minutes on 2 busy cores
    python -m recipes.grpo_agent total_steps=20       # any PipelineConfig field, as in the other recipes
    python -m recipes.grpo_agent --help

The agent below is a plain ``openai.AsyncOpenAI`` loop with one tool, ``peek``, that reads the instance's secret
digit (one of ten, by seed); it knows nothing of rollart except the ``base_url`` and ``api_key`` it is handed.
Each trajectory: ask the model (up to max_new_tokens=8 tokens); if it calls ``peek`` the agent sends the tool's
result back and asks again for a one-token answer (``max_tokens=1``, as any OpenAI client may ask). The answer
is the first digit written. Success = the right digit after peeking: the answer depends on the tool's result, so
guessing gets a tenth at best and is not rewarded. The policy is the tiny ~0.9M-parameter model trained from
scratch (built on first run under runs/<run>/init_model), so a tool call is the one-token ``@`` anywhere in the
reply (``ToolSyntax("@", "")``; with one tool offered the name may be left out).

Reward (shaped, so a policy from random init has something to climb; success alone is the score): 1 for the
right digit after peeking; after peeking, R_PEEK (0.2) plus R_DIGIT (0.3) for answering with a digit at all,
or R_PEEK / 2 for calling the tool a second time instead of answering; 0 without peeking.

What the default run learns (measured with seeds 0 and 1, README): the protocol (peek once, then answer one
digit) within ~60 steps; the policy then settles on one digit for every secret, so greedy success is at most
0.10 (one secret of ten) in 80 steps: copying the tool's digit is not learned yet.

``warmup_steps=60 trainer.kl_coef=0.1`` starts RL from a model that already follows the protocol, as a pretrained
LLM would: a format warm-up on runs of this very agent through the gateway whose replies are ``sample_reply``'s
(peek, then a random digit), with GRPO's KL penalty to that start. It does not make the copy learnable in a
short run either: with the secrets cut to four (0-3), 8 groups x 8 and lr 1e-3 / 2e-3 / 3e-3, greedy success
stayed at chance (0.25) for 150 steps in three runs (2026-11-26), the sampled success rising only from ~0.09 to
~0.2 (the answers moving onto the four possible digits, not onto the secret).

What stands in the way, measured on 2026-11-27 (secrets 0-3, 8 groups x 8, seed 0, no KL penalty): the copy is
learnable from the gateway's own token rows. GRPO through the same TorchTrainer at lr 1e-3 on the answer token
alone, with the first call's reply held at the warm-up's "@" + end, reached greedy 0.5 at step 50 and 0.75 at step
120. In a run, the same updates change what the first call writes, and with it every context the answer is learned
in: the batches a run trains on hold "@<|im_end|>" in every trajectory at step 1 and replies like "@031@1103" from
step 2-3 at lr 1e-3 (AdamW's first steps move every weight by about lr, ~5 % of the tiny model's scale); at lr 1e-4
the first reply drifts to eight "@"s by step 75 (nothing holds a reward-neutral format in place without a KL
penalty); at lr 3e-4 the format holds but the answers collapse onto one digit. Greedy success stayed at 0.20-0.30
(the share of the ten evaluation secrets that one digit hits) in all six runs: sync and async at lr 1e-3 (warm-up
60 steps, 120 steps; warm-up 200, stopped at 140 and 120), async at 3e-4 and 1e-4 (warm-up 200, 200 steps).

The gateway records every call's token ids, logprobs and policy version; the trainer trains on exactly those
tokens (the model's own, loss-masked; prompts and tool results are context only). No re-tokenisation.

Watch in tensorboard (`tensorboard --logdir runs`): charts/success and charts/reward (sampled, per step),
charts/eval_success/peek (greedy over the ten secrets, every eval_every steps). The last lines printed are the
sampled reward and success by step, the greedy success by step and `final_success=<greedy success of the final
weights over the ten secrets>`.
"""
from __future__ import annotations

import importlib.util
import logging

from rollart.config import parse_overrides
from rollart.gateway.agent_task import AgentInstance, AgentTask
from rollart.gateway.tool_format import ToolSyntax
from rollart.pipeline import PipelineConfig
from rollart.rollout.scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

from recipes.launch import run

SECRETS = "0123456789"
"""The secret digits (one per task instance, by seed; evaluation plays each once)."""
PEEK = [{"type": "function", "function": {"name": "peek", "description": "read the secret digit",
                                          "parameters": {"type": "object", "properties": {}}}}]
R_PEEK = 0.2
"""Reward for calling the tool once (the protocol), halved for calling it again instead of answering."""
R_DIGIT = 0.3
"""Added after peeking for answering with a digit at all (any digit; the right one earns 1)."""


async def agent(base_url: str, api_key: str, task: AgentInstance) -> dict:
    """The user's agent: an ordinary OpenAI-client tool loop (at most one tool call, then the answer)."""
    import openai  # the recipe's extra: pip install -e ".[agent]"

    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "system", "content": "Call peek, then answer with the secret digit."},
                {"role": "user", "content": "What is the secret?"}]
    peeked = False
    for _ in range(2):
        reply = (await client.chat.completions.create(model="policy", messages=messages, tools=PEEK,
                                                      max_tokens=1 if peeked else None)).choices[0].message
        if not reply.tool_calls or peeked:
            break
        peeked = True
        messages += [reply.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": task.data}]
    answer = "" if reply.tool_calls else reply.content or ""
    said = next((ch for ch in answer if ch.isdigit()), "")  # the answer is the first digit written
    correct = peeked and said == task.data
    digit = peeked and said != ""
    again = peeked and bool(reply.tool_calls)
    reward = 1.0 if correct else (R_PEEK / 2 if again else R_PEEK + R_DIGIT * digit) if peeked else 0.0
    return {"reward": reward, "success": correct}


def sample_reply(rng, call: int) -> str:
    """A reply that follows the agent's instructions and knows nothing of the secret: the first call peeks, the
    next answers a uniformly random digit. What the format warm-up trains on (``warmup_steps=60``; off by
    default, see the module docstring)."""
    return "@" if call == 0 else SECRETS[int(rng.integers(len(SECRETS)))]


TASK = AgentTask("peek", agent, make_task=lambda seed: SECRETS[(seed or 0) % len(SECRETS)], max_new_tokens=8,
                 tool_syntax=ToolSyntax("@", ""), max_calls=2, timeout_s=120, sample_reply=sample_reply)


def default_config() -> PipelineConfig:
    return PipelineConfig(
        mode="async", alpha=1, total_steps=80, batch_groups=4,
        rollout=SchedulerConfig(group_size=16, max_concurrency=64),
        trainer=TrainerConfig(lr=3e-3, entropy_coef=0.01, grad_clip=1.0, num_threads=1, adv_eps=1e-4),
        eval_every=5, eval_episodes=10, stop_at_success=0.9, stop_consecutive=2, time_limit_s=12 * 60,
        run_name="grpo_agent", env_hosts=0,
    )


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = parse_overrides(default_config(), doc=__doc__)
    if importlib.util.find_spec("openai") is None:
        raise SystemExit('error: recipes.grpo_agent\'s agent uses the openai client: pip install -e ".[agent]"')
    result = run(cfg, [TASK])
    rewards = ", ".join(f"{h['step']}:{h.get('charts/reward', float('nan')):.2f}" for h in result.history)
    print(f"sampled reward by step: {rewards}")
    sampled = ", ".join(f"{h['step']}:{h.get('charts/success', float('nan')):.2f}" for h in result.history)
    print(f"sampled success by step: {sampled}")
    print(f"greedy success by step: {', '.join(f'{s}:{e[TASK.name]:.2f}' for s, e in result.evals)}")
    print(f"steps={result.steps} version={result.version} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    print(f"final_success={result.final_success.get(TASK.name, float('nan')):.2f}")


if __name__ == "__main__":
    main()
