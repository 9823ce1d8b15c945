"""Acceptance: a do-nothing agent scores 0 on every shipped task, because its hidden FAIL_TO_PASS tests fail."""
import pytest

from envs.swe.scripted import do_nothing_actions
from envs.swe.task import load_builtin_tasks

from tests.swe.helpers import play_all

pytestmark = pytest.mark.usefixtures("sandbox_isolation")  # skips where no isolation works


def test_do_nothing_scores_zero_and_base_state_is_as_declared():
    results = play_all(load_builtin_tasks(), do_nothing_actions)
    for task in load_builtin_tasks():
        reward, infos, ev = results[task.instance_id]
        assert reward == 0.0, task.instance_id
        # the hidden tests really ran: FAIL_TO_PASS fail at base, PASS_TO_PASS pass at base
        assert all(ev.outcomes.get(t) in ("failed", "error") for t in task.fail_to_pass), (task.instance_id, ev.outcomes)
        assert all(ev.outcomes.get(t) == "passed" for t in task.pass_to_pass), (task.instance_id, ev.outcomes)
        assert infos[-1]["success"] is False
