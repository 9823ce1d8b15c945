"""`python -m envs.swe.validate`: accepts good tasks, flags a task whose gold patch does not fix it."""
import json
import shutil

import pytest

from envs.swe.loader import write_swebench_jsonl
from envs.swe.task import load_builtin_tasks
from envs.swe.validate import main

pytestmark = pytest.mark.usefixtures("sandbox_isolation")  # skips where no isolation works


def test_validate_good_and_broken_tasks(tmp_path, capsys):
    assert main(["task_ids=wrap-1"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "tasks=1 gold_ok=1 base_fails=1"
    task = next(t for t in load_builtin_tasks() if t.instance_id == "wrap-1")
    shutil.copytree(task.repo_dir, tmp_path / "repos" / task.repo.replace("/", "__"))
    path = tmp_path / "t.jsonl"
    write_swebench_jsonl([task], path)
    row = json.loads(path.read_text())
    row["patch"] = row["patch"].replace("+        elif len(current) + 1 + len(word) <= width:",
                                        "+        elif len(current) + len(word) <= width:  # still buggy")
    path.write_text(json.dumps(row) + "\n")
    assert main([f"tasks={path}", f"repos_root={tmp_path / 'repos'}"]) == 1
    out = capsys.readouterr().out
    assert "gold fails" in out and out.strip().splitlines()[-1] == "tasks=1 gold_ok=0 base_fails=1"
    assert main(["task_ids=nope"]) == 2
    assert "nope" in capsys.readouterr().err
