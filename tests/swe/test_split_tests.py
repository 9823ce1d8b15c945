"""The hidden tests split over test files (the action scheduler's DoP): same outcomes as one process, still
nonce-guarded; step_action tells the scheduler which steps run the suite and over how many files."""
import pytest

from envs.swe.env import SWEEnv, step_action
from envs.swe.reward import suite_files
from envs.swe.scripted import gold_patch_actions, run_episode, ScriptedAgent
from envs.swe.task import load_builtin_tasks
from envs.swe.toolcall import format_tool_call
from rollart.cpus import on_cores

from tests.swe.helpers import SANDBOX

TASK = next(t for t in load_builtin_tasks() if len(suite_files(t)) > 1)


def _eval(actions, cores):
    env = SWEEnv(task_ids=(TASK.instance_id,), sandbox=SANDBOX)
    try:
        with on_cores(cores):
            run_episode(env, ScriptedAgent(actions), {"task_id": TASK.instance_id})
        return env.last_eval
    finally:
        env.close()


@pytest.mark.usefixtures("sandbox_isolation")
def test_a_split_run_reports_every_test_like_one_process():
    one = _eval(gold_patch_actions(TASK), (0,))
    two = _eval(gold_patch_actions(TASK), (0, 1))
    assert one.reward == two.reward == 1.0
    assert one.outcomes == two.outcomes and set(two.outcomes) == set(TASK.fail_to_pass + TASK.pass_to_pass)
    broken = _eval([format_tool_call("submit")], (0, 1))  # no fix: the split run must fail it too
    assert broken.reward == 0.0 and broken.outcomes


def test_step_action_names_test_runs_and_their_core_cap():
    info = {"test_files": 2}
    assert step_action(format_tool_call("submit"), 0, 4, info) == ("test_run", 2)
    assert step_action(format_tool_call("view", path="a"), 3, 4, info) == ("test_run", 2)  # auto-submit
    assert step_action(format_tool_call("edit", path="a", old_str="x", new_str="y"), 0, 4, info) == ("file_op", 0)
    assert step_action(format_tool_call("run_tests"), 0, 4, info) == ("test_run", 1)
    assert step_action(format_tool_call("bash", command="ls"), 0, 4, info) == ("sandbox_command", 1)
    assert step_action("no tool call", 0, 4, info) == ("no_tool_call", 0)
