"""Load SWE-bench-format JSONL instances whose repositories are local snapshots.

Each line has instance_id, repo, base_commit, problem_statement, patch, test_patch, FAIL_TO_PASS,
PASS_TO_PASS (lists or JSON-encoded lists, as SWE-bench ships them). The repository is looked up as
``<repos_root>/<repo with "/" → "__">`` (or ``<repos_root>/<repo>``):

* a git checkout: the tree at ``base_commit`` is exported (``git archive``) into a cache directory;
* a plain directory: used as the base state as it is (``base_commit`` is only recorded).

No network is touched. Extra optional keys: test_cmd, protected_paths, noconftest.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from envs.swe.task import SWETask, TaskError, task_from_row


def _repo_path(repos_root: Path, repo: str, where: str) -> Path:
    for cand in (repos_root / repo.replace("/", "__"), repos_root / repo):
        if cand.is_dir():
            return cand
    raise TaskError(f"{where}: repository {repo!r} not found under {repos_root} "
                    f"(expected {repos_root / repo.replace('/', '__')})")


def _export_commit(repo: Path, commit: str, cache_dir: Path, where: str) -> Path:
    target = cache_dir / f"{repo.name}@{commit}"
    if target.is_dir():
        return target
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=cache_dir))
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                             capture_output=True)
    if archive.returncode != 0:
        raise TaskError(f"{where}: base_commit {commit!r} not found in {repo}: "
                        f"{archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    try:
        tmp.rename(target)
    except OSError:
        pass  # exported concurrently
    return target


def load_swebench_jsonl(path: str | Path, repos_root: str | Path,
                        cache_dir: str | Path | None = None) -> list[SWETask]:
    """Read every instance of a JSONL file; a bad line raises naming the file, line and field."""
    path, repos_root = Path(path), Path(repos_root)
    cache = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "rollart-swe-snapshots"
    cache.mkdir(parents=True, exist_ok=True)
    tasks = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskError(f"{where}: not valid JSON ({e})") from None
        if not isinstance(row, dict) or "repo" not in row:
            raise TaskError(f"{where}: expected an object with a 'repo' field")
        repo = _repo_path(repos_root, row["repo"], where)
        commit = str(row.get("base_commit") or "")
        if (repo / ".git").exists() and commit:
            repo = _export_commit(repo, commit, cache, where)
        tasks.append(task_from_row(row, repo, where))
    if not tasks:
        raise TaskError(f"{path}: no instances")
    return tasks


def write_swebench_jsonl(tasks: list[SWETask], path: str | Path) -> None:
    """Write tasks as SWE-bench JSONL (the repo field names the snapshot directory)."""
    with open(path, "w") as f:
        for t in tasks:
            f.write(json.dumps(t.to_swebench()) + "\n")
