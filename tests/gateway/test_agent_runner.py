"""AgentRunner on the real gateway and engine: the staleness gate refuses a call and the trajectory ends aborted,
the call budget, agent errors, rewards computed afterwards from the recorded calls."""
import openai
import pytest

from rollart.gateway.agent_task import AgentRunner, AgentTask

pytestmark = pytest.mark.timeout(120)


class RefuseSecondTurn:
    """A staleness gate that lets a trajectory start and refuses its next turn."""
    version = 0

    def __init__(self):
        self.tracked, self.untracked = {}, []

    def admit_turn(self, start_version, first_turn):
        return None if first_turn else "stale: started at version 0, the window moved on"

    def track(self, tid, start_version, task):
        self.tracked[tid] = start_version

    def untrack(self, tid):
        self.untracked.append(tid)

    def stale_reason(self, tid):
        return None


def agent(calls, catch=False):
    async def run(base_url, api_key, task):
        c = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        for i in range(calls):
            try:
                await c.chat.completions.create(model="m", messages=[{"role": "user", "content": f"turn {i}"}])
            except openai.APIStatusError:
                if not catch:
                    raise
                break
        return None if calls == 0 else 1.0
    return run


async def test_a_refused_turn_aborts_the_trajectory(served):
    gw, _, _, _ = served
    gate = RefuseSecondTurn()
    traj = await AgentRunner(gw, gate).run(AgentTask("a", agent(3, catch=True), max_new_tokens=2), "t", "g", 1)
    assert traj.status == "aborted" and "window moved on" in traj.reason
    assert gate.tracked == {"t": 0} and gate.untracked == ["t"]
    traj = await AgentRunner(gw, gate).run(AgentTask("a", agent(3), max_new_tokens=2), "u", "g", 1)
    assert traj.status == "aborted"  # the agent let the 409 escape: same outcome


async def test_call_budget_errors_and_rewards_from_the_calls(served):
    gw, _, _, tok = served
    run = AgentRunner(gw).run
    traj = await run(AgentTask("a", agent(5, catch=True), max_new_tokens=2, max_calls=2), "b", "g", 1)
    assert traj.status == "done" and traj.num_turns == 2 and traj.reward == 0 and traj.info["env_return"] == 1.0
    traj = await run(AgentTask("a", agent(0), max_new_tokens=2), "c", "g", 1)
    assert traj.status == "failed" and "made no call" in traj.reason

    async def crashing(base_url, api_key, task):
        raise KeyError("the agent's own bug")
    traj = await run(AgentTask("a", crashing), "d", "g", 1)
    assert traj.status == "failed" and "the agent's own bug" in traj.reason

    async def silent(base_url, api_key, task):
        c = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        await c.chat.completions.create(model="m", messages=[{"role": "user", "content": task.data}])
    seen = []
    task = AgentTask("a", silent, make_task=lambda seed: f"question {seed}", max_new_tokens=3,
                     reward_fn=lambda result: seen.append(result) or 0.5)
    traj = await run(task, "e", "g", 5)
    assert traj.status == "done" and traj.info["env_return"] == 0.5 and traj.success
    assert seen[0].instance.data == "question 5" and len(seen[0].calls) == 1
    assert "question 5" in tok.decode(seen[0].calls[0].prompt_ids)
    with pytest.raises(openai.AuthenticationError):  # the key died with its trajectory
        await openai.AsyncOpenAI(base_url=gw.base_url, api_key="x", max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "late"}])
