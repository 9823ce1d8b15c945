"""Acceptance: a scripted agent applying each shipped task's gold patch through the tools scores 1.0."""
import pytest

from envs.swe.scripted import gold_patch_actions
from envs.swe.task import load_builtin_tasks

from tests.swe.helpers import play_all

pytestmark = pytest.mark.usefixtures("sandbox_isolation")  # skips where no isolation works


def test_suite_has_at_least_20_varied_tasks():
    tasks = load_builtin_tasks()
    assert len(tasks) >= 20
    assert len({t.repo for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.fail_to_pass and t.pass_to_pass and t.problem_statement.strip()


def test_gold_patch_through_tools_scores_one_on_every_task():
    results = play_all(load_builtin_tasks(), gold_patch_actions)
    failures = {tid: (r, ev.outcomes, ev.error, ev.output[-500:]) for tid, (r, _, ev) in results.items() if r != 1.0}
    assert not failures, failures
    for tid, (reward, infos, ev) in results.items():
        assert all(i["tool_errors"] == 0 for i in infos[1:]), (tid, infos)
        assert set(ev.outcomes.values()) == {"passed"}
