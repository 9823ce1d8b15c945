"""Test-based reward: hidden FAIL_TO_PASS and PASS_TO_PASS tests over the agent's final workspace.

Steps (all in a *fresh* sandbox, never the agent's):
1. copy the agent's final workspace (symlinks stay links; fifos and devices are dropped);
2. restore ``protected_paths`` to their base state and write the files of ``test_patch`` applied to
   the base — whatever the agent left at those paths (edits, new files, symlinks, directories) is
   removed first; the agent never saw these files and cannot change them now;
3. run pytest with our own config (``-c``), no cache, optionally ``--noconftest``, and our reporting
   plugin, which prints each test's outcome under a nonce sent on stdin;
4. reward = 1.0 iff every FAIL_TO_PASS and PASS_TO_PASS test reports "passed". A missing test
   (deleted, renamed, crashed interpreter, timeout) counts as failed. No partial credit in the reward;
   the pass fractions are returned for logging.
"""
from __future__ import annotations

import dataclasses
import re
import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from envs.swe.patch import parse_patch, patched_files
from envs.swe.task import SWETask
from rollart.cpus import granted_cores
from rollart.sandbox import Sandbox, SandboxConfig, UnsafePathError


@dataclass
class EvalResult:
    reward: float
    outcomes: dict[str, str] = field(default_factory=dict)
    fail_to_pass_passed: float = 0.0
    pass_to_pass_passed: float = 1.0
    output: str = ""
    duration_s: float = 0.0
    error: str = ""


def _base_text(task: SWETask, rel: str) -> str | None:
    p = task.repo_dir / rel
    return p.read_text() if p.is_file() and not p.is_symlink() else None


def hidden_files(task: SWETask) -> dict[str, str | None]:
    """path -> content the reward lays over the workspace (None = must not exist)."""
    files: dict[str, str | None] = {}
    for rel in task.protected_paths:
        base = task.repo_dir / rel
        if base.is_dir():
            for f in sorted(base.rglob("*")):
                if f.is_file() and not f.is_symlink() and "__pycache__" not in f.parts:
                    files[str(f.relative_to(task.repo_dir))] = f.read_text()
        else:
            files[rel] = _base_text(task, rel)
    files.update(patched_files(task.test_patch, lambda rel: _base_text(task, rel)))
    return files


def test_patch_paths(task: SWETask) -> list[str]:
    return [fp.path for fp in parse_patch(task.test_patch)]


def pytest_command(task: SWETask, harness: str, workspace: str, test_ids: list[str]) -> str:
    opts = ["-p", "rollart_report", "-p", "no:cacheprovider", "-c", f"{harness}/pytest.ini",
            "--rootdir", workspace, "-q", "-o", "addopts="]
    if task.noconftest:
        opts.append("--noconftest")
    return "python3 -s -m pytest " + " ".join(shlex.quote(o) for o in opts + ["--", *test_ids])


def suite_files(task: SWETask) -> list[str]:
    """The hidden suite's test files, in order: the most processes a per-file split can use."""
    return list(dict.fromkeys(tid.split("::")[0] for tid in task.fail_to_pass + task.pass_to_pass))


def split_command(task: SWETask, harness: str, workspace: str, ids: list[str], workers: int) -> str:
    """The hidden tests as ``workers`` pytest processes over disjoint groups of test files, run at once in
    one sandbox command (the action scheduler's degree of parallelism for this test run); each reads the
    nonce from the shell, which reads it once from stdin. One worker: the plain single-process command."""
    files = suite_files(task)
    workers = max(1, min(workers, len(files)))
    if workers == 1:
        return pytest_command(task, harness, workspace, ids)
    groups = [[tid for tid in ids if tid.split("::")[0] in files[g::workers]] for g in range(workers)]
    runs = " ".join(f"(printf '%s\\n' \"$n\" | {pytest_command(task, harness, workspace, g)}) &" for g in groups)
    return f"read -r n; {runs} wait"


def evaluate(task: SWETask, workspace: str | Path, sandbox_config: SandboxConfig | None = None,
             timeout_s: float = 60.0, workers: int | None = None) -> EvalResult:
    """Run the hidden tests of ``task`` over a copy of ``workspace``; never raises for agent faults.
    ``workers``: pytest processes over disjoint test files (default: the cores granted to this thread's
    action, 1 outside actions; capped at the suite's file count)."""
    start = time.monotonic()
    if workers is None:
        workers = len(granted_cores() or (0,))
    cfg = sandbox_config or SandboxConfig()
    # keep the whole pytest output: the outcome lines come last and must not be truncated away
    cfg = dataclasses.replace(cfg, output_limit_bytes=max(cfg.output_limit_bytes, 1 << 20))
    ids = list(dict.fromkeys(task.fail_to_pass + task.pass_to_pass))
    with Sandbox(cfg, name=f"reward-{task.instance_id}") as sb:
        try:
            sb.copy_in(workspace)
        except (OSError, ValueError) as e:
            return EvalResult(0.0, error=f"copying the workspace failed: {e}", duration_s=time.monotonic() - start)
        for rel, content in hidden_files(task).items():
            try:
                if content is None:
                    sb.write_file(rel, b"", replace_any=True)
                    (sb.workspace / rel).unlink()
                else:
                    sb.write_file(rel, content.encode(), replace_any=True)
            except (OSError, UnsafePathError) as e:
                return EvalResult(0.0, error=f"placing hidden test {rel} failed: {e}",
                                  duration_s=time.monotonic() - start)
        nonce = secrets.token_hex(16)
        p = sb.paths
        # the workspace is not on PYTHONPATH: `python -m` adds it to sys.path only after site init, so an
        # agent's sitecustomize.py / usercustomize.py is never imported
        env = {"PYTHONPATH": f"{p.harness}:{p.site}"}
        result = sb.run(split_command(task, p.harness, p.workspace, ids, workers), timeout_s=timeout_s,
                        stdin=(nonce + "\n").encode(), env=env)
    outcomes: dict[str, str] = {}
    for outcome, nodeid in re.findall(rf"^{nonce} (passed|failed|error|skipped) (.+)$", result.output, re.M):
        outcomes[nodeid] = outcome
    passed = lambda tid: outcomes.get(tid) == "passed"  # noqa: E731
    f2p = sum(map(passed, task.fail_to_pass)) / len(task.fail_to_pass)
    p2p = sum(map(passed, task.pass_to_pass)) / len(task.pass_to_pass) if task.pass_to_pass else 1.0
    visible = "\n".join(line for line in result.output.splitlines() if not line.startswith(nonce))
    return EvalResult(reward=1.0 if f2p == 1.0 and p2p == 1.0 else 0.0, outcomes=outcomes,
                      fail_to_pass_passed=f2p, pass_to_pass_passed=p2p, output=visible,
                      duration_s=time.monotonic() - start,
                      error="timeout" if result.timed_out else result.killed_reason)
