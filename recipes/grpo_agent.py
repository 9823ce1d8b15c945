"""Train an existing OpenAI-client agent through the gateway: "peek at the secret digit, then say it", on CPU.

    python -m recipes.grpo_agent                      # 150 steps, ~10-15 minutes on 2 cores (format warm-up included)
    python -m recipes.grpo_agent total_steps=20       # any PipelineConfig field, as in the other recipes
    python -m recipes.grpo_agent --help

The agent below is a plain ``openai.AsyncOpenAI`` loop with one tool, ``peek``, that reads the instance's secret
digit (one of ten, by seed); it knows nothing of rollart except the ``base_url`` and ``api_key`` it is handed.
Each trajectory: the agent's first call names ``peek`` in ``tool_choice`` (as agents do when a step must use a
tool), so the gateway writes that call and the model samples nothing; the agent sends the tool's result back and
asks for a one-token answer (``max_tokens=1``). The answer is the first digit written. Success = the right digit:
the answer depends on the tool's result, so guessing gets a tenth. The policy is the tiny ~0.9M-parameter model
trained from scratch (built on first run under runs/<run>/init_model, then format-warmed for ``warmup_steps=60``
on runs of this very agent whose answers are ``sample_reply``'s random digits: it starts answering a digit, any
digit, as a pretrained LLM would). A tool call is the one-token ``@`` anywhere in a reply (``ToolSyntax("@", "")``).

Reward (shaped; success alone is the score): 1 for the right digit; R_PEEK (0.2) plus R_DIGIT (0.3) for any other
digit, R_PEEK / 2 for calling the tool again instead of answering, R_PEEK for an answer without a digit.

What the default run learns (2026-11-27, two runs at a time on the 2-core machine, 520-805 s each), greedy
success over the ten secrets every 10 steps, seeds 0-4: seed 0 0.10 to step 40, 0.50 at step 90, 0.80 at step
120, ``final_success=1.00`` (the slow test's run); seed 1 0.40 at step 40, 0.90 from step 70 (stopped after 81
steps, final 0.90); seed 2 0.50 at step 50, 0.40-0.50 to step 120, final 0.60; seed 3 0.50 at step 60, 0.90 at
step 100, 1.00 at step 110 (stopped after 111 steps, final 0.90); seed 4 0.40 at step 70, 0.70 at step 110, final
0.90. Every seed reads the tool's result for six to ten of the digits.

Three settings got it there, each measured. The agent's prompt is one short user message and ``peek`` has no
description, so the row the answer is learned in is 77 tokens where it was 126 (a system message "Call peek, then
answer with the secret digit." and the tool's description "read the secret digit"): a supervised probe of the copy
on the format-warmed seed-1 models (64 rows a step, lr 1e-3; not part of the recipe) leaves chance after ~20 steps
on the short row and ~50 on the long one (then holds 0.70 to step 100, where the long row's reaches 0.90 at step
80), and RL, where about a tenth of the samples are right at first, needs several times as many steps. 16
trajectories a group (8 groups, 128 a step): with the short prompt, no KL and 8 x 8, seeds 1 and 2 learned (0.70,
0.50) and seed 0 stayed at 0.10 for 150 steps; with 8 x 16 (or 16 x 8) seed 0 ended at 0.70. A KL penalty of 0.1
to the format-warmed model (``kl_coef``), which holds the answer format: with the short prompt, 8 x 16 and no KL,
seeds 0-3 ended at 0.70, 1.00, 0.50 and 0.80, and seed 4 stayed at 0.10-0.20, its sampled reward falling from
~0.55 to ~0.3 from step 78 (answers without a digit, or a second call). With the long prompt and 8 x 8 (no KL),
seed 0 ended at 0.60 and seed 1 peaked at 0.40 and fell back to 0.10.

``FORCE_PEEK = False`` leaves the peek to the model (the free protocol: ask, and if the reply calls ``peek`` answer
its result and ask again). That does not learn the copy, measured (with the long prompt and 8 x 8): from random
init (80 steps) the protocol is learned but greedy success stays at 0.00-0.10; with the format warm-up, secrets 0-3,
greedy success stayed at chance (0.20-0.30: one digit for every secret) in nine runs of 100-200 steps, sync and
async, lr 1e-4 to 3e-3, with and without a KL penalty. The cause, measured on batches dumped from those runs: the
updates also move what the first call writes, and with it every context the answer is learned in ("@<|im_end|>"
in every trajectory at step 1, replies like "@031@1103" from step 2-3 at lr 1e-3; eight "@"s by step 75 at lr
1e-4), or, at lr 3e-4, the answers collapse onto one digit. With the first reply held fixed, the same trainer
learns the copy offline (greedy 0.75 after 120 steps), which is what the forced call gives a run.

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

from rollart.config import exit_on_config_error, parse_overrides
from rollart.gateway.agent_task import AgentInstance, AgentTask
from rollart.gateway.tool_format import ToolSyntax
from rollart.pipeline import PipelineConfig
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

from recipes.launch import run

SECRETS = "0123456789"
"""The secret digits (one per task instance, by seed; evaluation plays each once)."""
PEEK = [{"type": "function", "function": {"name": "peek",
                                          "parameters": {"type": "object", "properties": {}}}}]
R_PEEK = 0.2
"""Reward for calling the tool once (the protocol), halved for calling it again instead of answering."""
R_DIGIT = 0.3
"""Added after peeking for answering with a digit at all (any digit; the right one earns 1)."""
FORCE_PEEK = True
"""The agent makes its first call with ``tool_choice`` naming ``peek`` (the gateway writes that call; the model
samples nothing), so the model learns to say the digit the tool returned. False: the model decides whether to peek
(the free protocol; measured not to learn the copy, see the module docstring)."""
FORCED = {"type": "function", "function": {"name": "peek"}}


async def agent(base_url: str, api_key: str, task: AgentInstance) -> dict:
    """The user's agent: an ordinary OpenAI-client tool loop (at most one tool call, then the answer)."""
    import openai  # the recipe's extra: pip install -e ".[agent]"

    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": "What is the secret?"}]
    peeked = False
    for _ in range(2):
        force = {"tool_choice": FORCED} if FORCE_PEEK and not peeked else {}
        reply = (await client.chat.completions.create(model="policy", messages=messages, tools=PEEK,
                                                      max_tokens=1 if peeked else None, **force)).choices[0].message
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
    """A reply that follows the agent's instructions and knows nothing of the secret: a uniformly random digit
    (with ``FORCE_PEEK = False`` the first call peeks first). What the format warm-up trains on
    (``warmup_steps``)."""
    return "@" if call == 0 and not FORCE_PEEK else SECRETS[int(rng.integers(len(SECRETS)))]


TASK = AgentTask("peek", agent, make_task=lambda seed: SECRETS[(seed or 0) % len(SECRETS)], max_new_tokens=8,
                 tool_syntax=ToolSyntax("@", ""), max_calls=2, timeout_s=120, sample_reply=sample_reply)


def default_config() -> PipelineConfig:
    return PipelineConfig(
        mode="async", alpha=1, total_steps=150, batch_groups=8, warmup_steps=60,
        rollout=SchedulerConfig(group_size=16, max_concurrency=128),
        trainer=TrainerConfig(lr=1e-3, grad_clip=1.0, num_threads=1, adv_eps=1e-4, kl_coef=0.1),
        eval_every=10, eval_episodes=10, stop_at_success=0.9, stop_consecutive=2, time_limit_s=25 * 60,
        run_name="grpo_agent", env_hosts=0,
    )


@exit_on_config_error()
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
