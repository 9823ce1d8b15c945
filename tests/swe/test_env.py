"""The rollart/SWE-v0 gymnasium env: tools, errors as observations, truncation, turn limit, timings, registration."""
import json

import gymnasium as gym
import pytest

import envs.swe
from envs.swe.env import SWEEnv
from envs.swe.toolcall import format_tool_call
from rollart.sandbox import SandboxUnavailable

from tests.swe.helpers import SANDBOX

pytestmark = pytest.mark.usefixtures("sandbox_isolation")  # skips where no isolation works


@pytest.fixture
def env():
    e = SWEEnv(task_ids=("pager-1",), sandbox=SANDBOX, observation_limit=1500, max_turns=8)
    yield e
    e.close()


def test_reset_gives_issue_fresh_workspace_and_timings(env):
    obs, info = env.reset(seed=0)
    assert "Last page is missing" in obs and "<tool_call>" in obs
    assert info["task_id"] == "pager-1" and info["sandbox_mode"] in ("bwrap", "unshare", "rlimit")
    assert env.timings["env/reset_s"] > 0 and "timings" not in info  # wall-clock time stays out of info
    env.step(format_tool_call("bash", command="echo dirty > pager/core.py"))
    env.reset(options={"task_id": "pager-1"})  # a new episode starts from the pristine repo
    obs, *_ = env.step(format_tool_call("view", path="pager/core.py", start_line=11, end_line=12))
    assert "    11\t    def page_count(self):" in obs and "    12\t" in obs and "13\t" not in obs
    assert "dirty" not in obs


def test_tools_and_error_observations(env):
    env.reset(options={"task_id": "pager-1"})
    obs, r, term, trunc, info = env.step("no tool call here")
    assert "no tool call found" in obs and info["tool_errors"] == 1 and not term and r == 0
    obs, *_ = env.step('<tool_call>{"name": "bash", "arguments": {"command": </tool_call>')
    assert "invalid JSON" in obs
    obs, *_ = env.step(format_tool_call("rm_rf", path="/"))
    assert "unknown tool" in obs and "bash" in obs
    obs, *_ = env.step(format_tool_call("edit", path="pager/core.py", old_str="self", new_str="me"))
    assert "occurs" in obs and "exactly once" in obs
    obs, *_ = env.step(format_tool_call("view", path="../../etc/passwd"))
    assert "error" in obs and "root:" not in obs
    obs, *_ = env.step(format_tool_call("view", path="/etc/passwd"))
    assert "outside the workspace" in obs
    obs, *_ = env.step(format_tool_call("create", path="notes/a.txt", content="hello\n") +
                       format_tool_call("bash", command="cat notes/a.txt; exit 4"))
    assert "wrote notes/a.txt" in obs and "hello" in obs and "[exit code 4]" in obs
    obs, *_ = env.step(format_tool_call("view", path="notes/a.txt", start_line="1"))
    assert "must be a integer" in obs


def test_symlink_planted_by_agent_is_not_followed_by_host_tools(env):
    env.reset(options={"task_id": "pager-1"})
    env.step(format_tool_call("bash", command="ln -s /etc/passwd leak; ln -s /tmp out"))
    obs, *_ = env.step(format_tool_call("view", path="leak"))
    assert "root:" not in obs and "error" in obs
    obs, *_ = env.step(format_tool_call("create", path="out/pwned.txt", content="x"))
    assert "error" in obs and "symlink" in obs


def test_long_observation_truncated_with_marker(env):
    env.reset(options={"task_id": "pager-1"})
    obs, *_ = env.step(format_tool_call("bash", command="seq 1 3000"))
    assert "output truncated" in obs or "characters not shown" in obs
    assert len(obs) < 1500 + 200


def test_run_tests_then_turn_limit_auto_submits(env):
    env.reset(options={"task_id": "pager-1"})
    obs, *_ = env.step(format_tool_call("run_tests"))
    assert "passed" in obs
    for _ in range(6):
        obs, r, term, trunc, info = env.step(format_tool_call("bash", command="true"))
        assert not term
    obs, r, term, trunc, info = env.step(format_tool_call("bash", command="true"))
    assert term and info["auto_submitted"] and r == 0.0 and "turn limit" in obs
    assert env.timings["env/eval_s"] > 0 and env.timings["env/step_s"] >= env.timings["env/eval_s"]
    assert json.dumps(env.timings) and json.dumps(info)  # plain values, ready for a log
    with pytest.raises(RuntimeError, match="reset"):
        env.step(format_tool_call("submit"))
    assert env.sandbox is None  # torn down at episode end


def test_unknown_task_and_bad_config_are_clear_errors():
    with pytest.raises(ValueError, match="task_ids"):
        SWEEnv(task_ids=("nope-1",))
    with pytest.raises(ValueError, match="max_turns"):
        SWEEnv(max_turns=0)
    e = SWEEnv(task_ids=("pager-1",))
    with pytest.raises(ValueError, match="unknown task"):
        e.reset(options={"task_id": "nope"})


def test_gymnasium_registration():
    envs.swe.register()
    envs.swe.register()  # idempotent
    e = gym.make("rollart/SWE-v0", task_ids=("roman-1",), sandbox=SANDBOX)
    try:
        obs, info = e.reset(seed=1)
        assert info["task_id"] == "roman-1"
        obs, r, term, trunc, info = e.step(format_tool_call("submit"))
        assert term and r == 0.0
    finally:
        e.close()


def test_broken_task_costs_one_episode_not_the_env(tmp_path):
    import dataclasses
    env = SWEEnv(task_ids=("roman-1",), sandbox=SANDBOX)
    try:
        env.tasks = [dataclasses.replace(env.tasks[0], test_patch="--- a/x\n+++ b/x\n@@ -1 +1 @@\n-nope\n+x\n")]
        env.reset()
        obs, r, term, _, info = env.step(format_tool_call("submit"))
        assert term and r == 0.0 and "evaluation failed" in info["eval_error"]
        env.reset()  # the env keeps working
    finally:
        env.close()


def test_play_cli_scripted_and_random(capsys):
    from rollart.rollout.play import main
    assert main(["rollart/SWE-v0", "--policy", "scripted", "--episodes", "1", "--quiet"]) == 0
    assert "mean_reward=1.000" in capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["rollart/SWE-v0", "--policy", "random", "--episodes", "1", "--quiet", "--max-turns", "4"]) == 0
    assert "mean_reward=0.000" in capsys.readouterr().out.strip().splitlines()[-1]


def test_env_refuses_to_start_without_isolation(no_isolation):
    with pytest.raises(SandboxUnavailable, match="install bubblewrap"):
        SWEEnv(task_ids=("pager-1",))
