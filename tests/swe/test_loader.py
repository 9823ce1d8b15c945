"""SWE-bench JSONL loader over local snapshots (git checkout at base_commit, or plain directory)."""
import json
import shutil
import subprocess

import pytest

from envs.swe.env import SWEEnv
from envs.swe.loader import load_swebench_jsonl, write_swebench_jsonl
from envs.swe.scripted import ScriptedAgent, gold_patch_actions, run_episode
from envs.swe.task import TaskError, load_builtin_tasks

from tests.swe.helpers import play


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


@pytest.fixture
def pager_jsonl(tmp_path):
    task = next(t for t in load_builtin_tasks() if t.instance_id == "pager-1")
    repo = tmp_path / "repos" / "acme__pager"
    shutil.copytree(task.repo_dir, repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "pager" / "core.py").write_text("raise ImportError('a later commit broke everything')\n")
    _git(repo, "commit", "-qam", "later")
    row = task.to_swebench() | {"repo": "acme/pager", "base_commit": base}
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path, tmp_path / "repos", task


@pytest.mark.usefixtures("sandbox_isolation")
def test_git_snapshot_exported_at_base_commit_and_gold_scores_one(pager_jsonl, tmp_path):
    path, repos, builtin = pager_jsonl
    [task] = load_swebench_jsonl(path, repos, cache_dir=tmp_path / "cache")
    assert task.instance_id == "pager-1" and task.repo == "acme/pager"
    assert "per_page" in (task.repo_dir / "pager" / "core.py").read_text()  # base state, not the later commit
    assert not (task.repo_dir / ".git").exists()
    assert task.fail_to_pass == builtin.fail_to_pass
    env = SWEEnv(tasks=str(path), repos_root=str(repos))
    try:
        reward, _ = run_episode(env, ScriptedAgent(gold_patch_actions(task)))
    finally:
        env.close()
    assert reward == 1.0


@pytest.mark.usefixtures("sandbox_isolation")
def test_plain_directory_snapshot_and_roundtrip(tmp_path):
    tasks = [t for t in load_builtin_tasks() if t.instance_id in ("roman-1", "wrap-1")]
    repos = tmp_path / "repos"
    for t in tasks:
        shutil.copytree(t.repo_dir, repos / t.repo.replace("/", "__"))
    path = tmp_path / "suite.jsonl"
    write_swebench_jsonl(tasks, path)
    loaded = load_swebench_jsonl(path, repos, cache_dir=tmp_path / "cache")
    assert [t.instance_id for t in loaded] == ["roman-1", "wrap-1"]
    assert all(isinstance(t.fail_to_pass, list) and t.noconftest for t in loaded)
    reward, _, _ = play(loaded[0], gold_patch_actions(loaded[0]))
    assert reward == 1.0


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.pop("test_patch"), "missing field"),
    (lambda r: r.update(repo="acme/nothing"), "not found under"),
    (lambda r: r.update(base_commit="deadbeef"), "base_commit"),
    (lambda r: r.update(FAIL_TO_PASS="[oops"), "FAIL_TO_PASS"),
    (lambda r: r.update(FAIL_TO_PASS=[]), "FAIL_TO_PASS is empty"),
])
def test_bad_rows_name_file_line_and_field(pager_jsonl, tmp_path, mutate, message):
    path, repos, _ = pager_jsonl
    row = json.loads(path.read_text())
    mutate(row)
    path.write_text("\n" + json.dumps(row) + "\n")
    with pytest.raises(TaskError, match=message) as e:
        load_swebench_jsonl(path, repos, cache_dir=tmp_path / "cache")
    assert "instances.jsonl" in str(e.value) or "pager-1" in str(e.value)


def test_invalid_json_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("{not json\n")
    with pytest.raises(TaskError, match="x.jsonl:1: not valid JSON"):
        load_swebench_jsonl(p, tmp_path)
