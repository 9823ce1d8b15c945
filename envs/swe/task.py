"""An SWE task in SWE-bench terms, and the built-in suite shipped under ``envs/swe/tasks/``.

Built-in layout, one directory per task::

    tasks/<instance_id>/task.json   problem_statement, patch (gold), test_patch (hidden tests),
                                    FAIL_TO_PASS, PASS_TO_PASS, and optional test_cmd / protected_paths
    tasks/<instance_id>/repo/...    the repository at its base state (visible tests included)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

TASKS_DIR = Path(__file__).with_name("tasks")
DEFAULT_TEST_CMD = "python3 -m pytest -q -p no:cacheprovider tests"


class TaskError(ValueError):
    """A task file or instance that is missing fields or points at nothing."""


@dataclass
class SWETask:
    """One instance: a repo snapshot with a bug, the issue text, hidden tests and the gold patch."""

    instance_id: str
    repo: str
    problem_statement: str
    patch: str
    test_patch: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    repo_dir: Path
    base_commit: str = ""
    test_cmd: str = DEFAULT_TEST_CMD
    protected_paths: list[str] = field(default_factory=list)
    """Files or directories restored to their base state before hidden tests run (besides test_patch's files)."""
    noconftest: bool = False
    """Run hidden tests with --noconftest (shipped tasks need no conftest; real repos often do)."""

    def __post_init__(self) -> None:
        if not self.fail_to_pass:
            raise TaskError(f"task {self.instance_id}: FAIL_TO_PASS is empty; a task needs a failing test")
        if not self.test_patch.strip():
            raise TaskError(f"task {self.instance_id}: test_patch is empty; hidden tests are required")

    def to_swebench(self) -> dict:
        """The SWE-bench JSONL row for this task (list fields JSON-encoded as SWE-bench does)."""
        return {"instance_id": self.instance_id, "repo": self.repo, "base_commit": self.base_commit,
                "problem_statement": self.problem_statement, "patch": self.patch,
                "test_patch": self.test_patch, "FAIL_TO_PASS": json.dumps(self.fail_to_pass),
                "PASS_TO_PASS": json.dumps(self.pass_to_pass), "test_cmd": self.test_cmd,
                "protected_paths": self.protected_paths, "noconftest": self.noconftest}


def _as_list(value, name: str, where: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskError(f"{where}: {name} must be a list or a JSON list string") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskError(f"{where}: {name} must be a list of test ids")
    return value


REQUIRED = ("instance_id", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")


def task_from_row(row: dict, repo_dir: Path, where: str) -> SWETask:
    """Build a task from an SWE-bench-style dict; errors name the file/line and the missing field."""
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise TaskError(f"{where}: missing field(s) {missing}; SWE-bench rows need {list(REQUIRED)}")
    return SWETask(
        instance_id=str(row["instance_id"]), repo=str(row.get("repo", row["instance_id"])),
        problem_statement=row["problem_statement"], patch=row["patch"], test_patch=row["test_patch"],
        fail_to_pass=_as_list(row["FAIL_TO_PASS"], "FAIL_TO_PASS", where),
        pass_to_pass=_as_list(row["PASS_TO_PASS"], "PASS_TO_PASS", where),
        repo_dir=repo_dir, base_commit=str(row.get("base_commit", "")),
        test_cmd=row.get("test_cmd") or DEFAULT_TEST_CMD,
        protected_paths=list(row.get("protected_paths", [])), noconftest=bool(row.get("noconftest", False)))


def load_builtin_tasks(tasks_dir: str | Path = TASKS_DIR) -> list[SWETask]:
    """All tasks of a suite directory (one sub-directory per task), sorted by id."""
    tasks_dir = Path(tasks_dir)
    tasks = []
    for task_json in sorted(tasks_dir.glob("*/task.json")):
        row = json.loads(task_json.read_text())
        repo_dir = task_json.parent / "repo"
        if not repo_dir.is_dir():
            raise TaskError(f"{task_json}: no repo/ directory beside it")
        tasks.append(task_from_row(row, repo_dir, str(task_json)))
    if not tasks:
        raise TaskError(f"no tasks found under {tasks_dir} (expected <id>/task.json)")
    return tasks
