"""EnvManager: a user's own registered env through the rollout machinery; masks, versions, failures."""
import asyncio

from rollout_helpers import host_of, make_manager, next_policy

from rollart.messages import GetStats
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.rollout.scripted import ScriptedPolicy


async def test_user_registered_env_runs_unchanged_through_scheduler(tokenizer):
    policy = next_policy(tokenizer, version=lambda: 7)
    manager = make_manager(policy, tokenizer)
    task = TaskSpec("countdown", "usertest/Countdown-v0", env_kwargs={"start": 3},
                    system_prompt="Say next.", max_new_tokens=8)
    scheduler = RolloutScheduler([task], manager, SchedulerConfig(group_size=3))
    groups = await scheduler.collect_batch(2)
    assert [len(g) for g in groups] == [3, 3]
    for traj in (t for g in groups for t in g):
        assert traj.status == "done" and traj.success and traj.reward == 1.0 and traj.num_turns == 3
        assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.logprobs) == len(traj.versions)
        model = [tok for tok, m in zip(traj.token_ids, traj.loss_mask) if m]
        assert tokenizer.decode(model) == "next<|im_end|>" * 3  # only the model's tokens are trained
        assert {v for v, m in zip(traj.versions, traj.loss_mask) if m} == {7}
        assert all(lp == 0.0 and v == -1 for lp, v, m in zip(traj.logprobs, traj.versions, traj.loss_mask) if not m)
        assert tokenizer.decode(traj.token_ids).startswith("<|im_start|>system\nSay next.<|im_end|>")
    assert policy.tasks == {"countdown": 18}  # every request carried its task
    assert len({t.group_id for t in groups[0]}) == 1 and groups[0][0].info["seed"] == groups[0][1].info["seed"]
    assert manager.pool.live == 0 and host_of(manager).stats(GetStats())["live_envs"] == 0


async def test_each_turn_prompt_extends_the_previous_prompt_and_output(tokenizer):
    prompts = []

    class Recording(ScriptedPolicy):
        async def generate(self, tid, prompt, sampling=None, task="default"):
            prompts.append(list(prompt))
            out = await super().generate(tid, prompt, sampling, task)
            prompts.append(out.token_ids)
            return out

    manager = make_manager(Recording(tokenizer, lambda t, o: "next"), tokenizer)
    traj = await manager.run(TaskSpec("c", "usertest/Countdown-v0"), "t0", "g0", seed=0)
    assert traj.status == "done" and len(prompts) == 6
    for turn in range(1, 3):
        before, output, now = prompts[2 * turn - 2], prompts[2 * turn - 1], prompts[2 * turn]
        assert now[:len(before) + len(output)] == before + output


async def test_env_raising_mid_trajectory_fails_it_with_the_reason(tokenizer):
    manager = make_manager(next_policy(tokenizer), tokenizer)
    task = TaskSpec("c", "usertest/Countdown-v0", env_kwargs={"start": 3, "crash_at": 1})
    traj = await manager.run(task, "t0", "g0", seed=0)
    assert traj.status == "failed" and "user env exploded" in traj.reason and traj.num_turns == 3
    assert manager.pool.live == 0


async def test_generation_error_fails_only_that_trajectory(tokenizer):
    def choose(tid, obs):
        if tid == "bad":
            raise ValueError("engine rejected the request")
        return "next"

    manager = make_manager(ScriptedPolicy(tokenizer, choose), tokenizer)
    task = TaskSpec("c", "usertest/Countdown-v0")
    bad, good = await asyncio.gather(manager.run(task, "bad", "g", 0), manager.run(task, "good", "g", 0))
    assert bad.status == "failed" and "engine rejected" in bad.reason
    assert good.status == "done" and manager.pool.live == 0


async def test_context_limit_truncates(tokenizer):
    manager = make_manager(ScriptedPolicy(tokenizer, lambda t, o: "wait"), tokenizer)
    task = TaskSpec("c", "usertest/Countdown-v0", max_total_tokens=200, max_new_tokens=8)
    traj = await manager.run(task, "t", "g", 0)
    assert traj.status == "done" and traj.info["truncated"] == "context" and len(traj.token_ids) <= 200


async def test_non_text_env_fails_with_a_clear_reason(tokenizer):
    manager = make_manager(next_policy(tokenizer), tokenizer)
    traj = await manager.run(TaskSpec("fl", "FrozenLake-v1"), "t", "g", 0)  # gymnasium's own: int states
    assert traj.status == "failed" and "observation" in traj.reason and "string" in traj.reason
    assert manager.pool.live == 0
