"""Train an existing OpenAI-client agent through the gateway: "call the tool, then answer", on CPU.

    python -m recipes.grpo_agent                      # 80 steps, ~11 minutes on 2 busy cores
    python -m recipes.grpo_agent total_steps=20       # any PipelineConfig field, as in the other recipes
    python -m recipes.grpo_agent --help

The agent below is a plain ``openai.AsyncOpenAI`` loop with one tool, ``peek``, that reads a secret digit;
it knows nothing of rollart except the ``base_url`` and ``api_key`` it is handed. Each trajectory: ask the
model; if it calls ``peek`` the agent runs the tool and sends its result back and asks again; the answer must
start with the secret. Success = the right answer after peeking (reward 1); on the way a digit answer, or
peeking at all, earns part of it (see ``agent``), so a policy trained from scratch has something to climb. The policy is the tiny ~0.9M-parameter model trained from scratch (built on first run
under runs/<run>/init_model), so tool calls use a one-token syntax, ``@peek`` (``ToolSyntax("@", "")``);
the secret digit comes from ``SECRETS``.

The gateway records every call's token ids, logprobs and policy version; the trainer trains on exactly those
tokens (the model's own, loss-masked; prompts and tool results are context only). No re-tokenisation.

Watch in tensorboard (`tensorboard --logdir runs`): charts/success and charts/reward (sampled, per step),
charts/eval_success/peek (greedy, every eval_every steps). The last lines printed are the success by step and
`final_success=<greedy success, final weights>`.
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

SECRETS = "1"
"""The secret digits (one per task instance, by seed). With one, the short run teaches the protocol (call the
tool, then answer); with several the model must also read the tool's result, which takes it far longer."""
PEEK = [{"type": "function", "function": {"name": "peek", "description": "read the secret digit",
                                          "parameters": {"type": "object", "properties": {}}}}]


async def agent(base_url: str, api_key: str, task: AgentInstance) -> dict:
    """The user's agent: an ordinary OpenAI-client tool loop (at most one tool call, then the answer)."""
    import openai  # the recipe's extra: pip install -e ".[agent]"

    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "system", "content": "Call peek, then answer with the secret digit."},
                {"role": "user", "content": "What is the secret?"}]
    peeked = False
    for _ in range(2):
        reply = (await client.chat.completions.create(model="policy", messages=messages, tools=PEEK)).choices[0].message
        if not reply.tool_calls or peeked:
            break
        peeked = True
        messages += [reply.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": task.data}]
    answer = "" if reply.tool_calls else reply.content or ""
    correct = answer.startswith(task.data)
    digit = answer[:1].isdigit()
    # the right answer after peeking is the goal; a digit, or peeking at all, earns a little on the way
    reward = (1.0 if correct else 0.35 if digit else 0.3) if peeked else (0.4 if correct else 0.1 if digit else 0.0)
    return {"reward": reward, "success": peeked and correct}


TASK = AgentTask("peek", agent, make_task=lambda seed: SECRETS[(seed or 0) % len(SECRETS)], max_new_tokens=2,
                 tool_syntax=ToolSyntax("@", ""), max_calls=2, timeout_s=120)


def default_config() -> PipelineConfig:
    return PipelineConfig(
        mode="async", alpha=1, total_steps=80, batch_groups=4,
        rollout=SchedulerConfig(group_size=16, max_concurrency=64),
        trainer=TrainerConfig(lr=2e-3, entropy_coef=0.01, grad_clip=1.0, num_threads=1, adv_eps=1e-4),
        eval_every=5, eval_episodes=8, stop_at_success=0.9, stop_consecutive=2, time_limit_s=12 * 60,
        run_name="grpo_agent", env_hosts=0,
    )


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = parse_overrides(default_config(), doc=__doc__)
    if importlib.util.find_spec("openai") is None:
        raise SystemExit('error: recipes.grpo_agent\'s agent uses the openai client: pip install -e ".[agent]"')
    result = run(cfg, [TASK])
    sampled = ", ".join(f"{h['step']}:{h.get('charts/success', float('nan')):.2f}" for h in result.history)
    print(f"sampled success by step: {sampled}")
    print(f"greedy success by step: {', '.join(f'{s}:{e[TASK.name]:.2f}' for s, e in result.evals)}")
    print(f"steps={result.steps} version={result.version} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    print(f"final_success={result.final_success.get(TASK.name, float('nan')):.2f}")


if __name__ == "__main__":
    main()
