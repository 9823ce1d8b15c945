"""Scripted SWE agents (no model): for tests, validation of tasks and ``python -m rollart.rollout.play``.

* :func:`gold_patch_actions` — applies the task's gold patch through the tools (``edit`` per hunk,
  ``create`` for new files, ``bash rm`` for deleted ones), optionally runs the visible tests, submits.
* :func:`do_nothing_actions` — submits at once.
* :func:`cheating_actions` — tries to win without fixing: rewrites the hidden test files it can
  guess (empty passing tests), plants conftest.py/pytest.ini that force passes, symlinks, then submits.
"""
from __future__ import annotations

from envs.swe.patch import parse_patch
from envs.swe.task import SWETask
from envs.swe.toolcall import format_tool_call


class ScriptedAgent:
    """Replays a fixed list of messages; ``act(observation)`` returns the next (submit when exhausted)."""

    def __init__(self, actions: list[str]) -> None:
        self.actions = list(actions)
        self.observations: list[str] = []

    def act(self, observation: str) -> str:
        self.observations.append(observation)
        return self.actions.pop(0) if self.actions else format_tool_call("submit")


def gold_patch_actions(task: SWETask, run_tests: bool = False) -> list[str]:
    actions = []
    for fp in parse_patch(task.patch):
        if fp.old_path is None:
            content = "".join(line[1:] for h in fp.hunks for line in h.lines if line[0] == "+")
            actions.append(format_tool_call("create", path=fp.new_path, content=content))
        elif fp.new_path is None:
            actions.append(format_tool_call("bash", command=f"rm -- '{fp.old_path}'"))
        else:
            for h in fp.hunks:
                actions.append(format_tool_call("edit", path=fp.path, old_str=h.old_text, new_str=h.new_text))
    if run_tests:
        actions.append(format_tool_call("run_tests"))
    return actions + [format_tool_call("submit")]


def do_nothing_actions(task: SWETask | None = None) -> list[str]:
    return [format_tool_call("submit")]


def cheating_actions(task: SWETask) -> list[str]:
    """Everything a reward hacker without the fix might try from inside the workspace."""
    fake = "".join(f"def {tid.split('::')[-1].split('[')[0]}():\n    pass\n\n"
                   for tid in task.fail_to_pass + task.pass_to_pass)
    actions = []
    for fp in parse_patch(task.test_patch):
        actions.append(format_tool_call("create", path=fp.path, content=fake))
    force_pass = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
                  "def pytest_runtest_makereport(item, call):\n    outcome = yield\n"
                  "    rep = outcome.get_result()\n    rep.outcome = 'passed'\n")
    actions += [
        format_tool_call("create", path="conftest.py", content=force_pass),
        format_tool_call("create", path="tests/conftest.py", content=force_pass),
        format_tool_call("create", path="pytest.ini", content="[pytest]\naddopts = -p no:python\n"),
        format_tool_call("create", path="sitecustomize.py", content="import os\nos._exit(0)\n"),
        format_tool_call("bash", command="chmod -R a-w tests 2>/dev/null; ln -s /tmp hidden_link; true"),
        format_tool_call("submit"),
    ]
    return actions


def run_episode(env, agent: ScriptedAgent, options: dict | None = None) -> tuple[float, list[dict]]:
    """Play one episode; returns (total reward, infos of every step, reset info first)."""
    obs, info = env.reset(options=options)
    infos = [info]
    total = 0.0
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        total += reward
        infos.append(info)
        if terminated or truncated:
            return total, infos
