"""AgentTask trajectories through a small real pipeline run: an openai-client agent, trained token-in/token-out
from what the gateway recorded; the gateway starts with the run and is gone after it."""
import asyncio

import openai
import pytest

from rollart.gateway.agent_task import AgentTask
from rollart.pipeline import Coordinator, PipelineConfig
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.tools.make_tiny_model import make_tiny_model
from rollart.trainer import TrainerConfig

SEEN: dict[str, list[int]] = {}
"""trajectory id -> completion ids the agent was sent (read from the response ids and the rollart field)."""
URLS: list[str] = []


async def two_call_agent(base_url, api_key, task):
    URLS.append(base_url)
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": f"instance {task.seed % 7}"}]
    text = ""
    for _ in range(2):
        r = await client.chat.completions.create(model="policy", messages=messages)
        tid = r.id.split("-", 1)[1].rsplit("-", 1)[0]
        SEEN.setdefault(tid, []).extend(r.model_extra["rollart"]["completion_token_ids"])
        text = r.choices[0].message.content or ""
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "again"}]
    return float(len(text) % 2)


async def check_reward(traj):
    """The run's reward: the agent's own (env_return), after checking what is trained is what was sampled."""
    model = [t for t, m in zip(traj.token_ids, traj.loss_mask) if m]
    assert model == SEEN[traj.trajectory_id], traj.trajectory_id
    assert traj.num_turns == 2 and traj.info["forks"] == 0
    return traj.info["env_return"]


@pytest.mark.timeout(240)
def test_agent_task_trains_through_a_pipeline_run(tmp_path):
    model = tmp_path / "tiny"
    make_tiny_model(model, hidden=64, layers=2, heads=1, kv_heads=1, seed=0)
    task = AgentTask("chatter", two_call_agent, max_new_tokens=3)
    cfg = PipelineConfig(model=str(model), total_steps=2, batch_groups=2, mode="async", alpha=1,
                         rollout=SchedulerConfig(group_size=4, max_concurrency=8, extra_envs_per_group=1),
                         trainer=TrainerConfig(num_threads=1), eval_every=0, eval_episodes=2,
                         logdir=str(tmp_path), run_name="agent", actor_mode="inprocess", quiet=True)
    result = asyncio.run(Coordinator(cfg, [task], reward_fn=check_reward).run())
    assert result.steps == 2 and result.version == 2
    assert result.buffer["trained"] >= 2 * 2  # groups of agent trajectories were trained on
    assert set(result.final_success) == {"chatter", "mean"}  # greedy evaluation ran the agent too
    assert all(h["rollout/reward_mean"] >= 0 for h in result.history)
    # the gateway was shut down with the run
    async def ask():
        return await openai.AsyncOpenAI(base_url=URLS[-1], api_key="x", max_retries=0).models.list()
    with pytest.raises(openai.APIConnectionError):
        asyncio.run(ask())
