"""``rollart/SWE-v0``: fix a bug in a small repository with tools; graded by hidden tests.

Observation and action are text. ``reset`` copies the task's repository into a fresh sandboxed
workspace and returns the instructions + issue. Each ``step`` takes the model's message, runs the
``<tool_call>`` blocks in it (see ``toolcall``) and returns their outputs, truncated with a marker.
``submit`` (or reaching ``max_turns``, which submits automatically) ends the episode: the hidden tests
run in a fresh sandbox and the reward is 1.0 iff all FAIL_TO_PASS and PASS_TO_PASS tests pass.

``info`` depends only on the seed and the actions (gymnasium's ``check_env`` holds it to that); the wall-clock
seconds of the last call are in ``env.timings``: ``env/reset_s`` (workspace preparation) or ``env/step_s``
(plus ``env/eval_s``, the hidden-test run, on the step that ends the episode).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym

from envs.swe.loader import load_swebench_jsonl
from envs.swe.reward import EvalResult, evaluate, suite_files
from envs.swe.task import SWETask, load_builtin_tasks
from envs.swe.scripted import gold_patch_actions
from envs.swe.toolcall import FORMAT_HINT, ToolCallError, format_tool_call, parse_tool_calls
from envs.swe.tools import TOOL_SCHEMAS, SWETools
from envs.text_space import AnyText
from rollart.config import ConfigError
from rollart.rollout.env_protocol import EnvDefaults
from rollart.sandbox import Sandbox, SandboxConfig, resolve_mode, truncate_text

log = logging.getLogger(__name__)

INSTRUCTIONS = """You are fixing an issue in the Python repository in your working directory ({workspace}).
Tools (call exactly as shown; JSON inside the tags):
  <tool_call>{{"name": "bash", "arguments": {{"command": "grep -rn foo ."}}}}</tool_call>
  <tool_call>{{"name": "view", "arguments": {{"path": "pkg/mod.py", "start_line": 1, "end_line": 40}}}}</tool_call>
  <tool_call>{{"name": "create", "arguments": {{"path": "pkg/new.py", "content": "..."}}}}</tool_call>
  <tool_call>{{"name": "edit", "arguments": {{"path": "pkg/mod.py", "old_str": "exact old text", "new_str": "new text"}}}}</tool_call>
  <tool_call>{{"name": "run_tests", "arguments": {{}}}}</tool_call>
  <tool_call>{{"name": "submit", "arguments": {{}}}}</tool_call>
There is no network. Commands time out. When the issue is fixed, submit; hidden tests then grade the repository.

Issue:
{problem}"""


@dataclass
class SWEEnvConfig:
    """Settings of the SWE env (gymnasium kwargs of the same names override them)."""

    tasks: str = "builtin"
    """"builtin" = the suite in envs/swe/tasks; a directory of <id>/task.json; or an SWE-bench JSONL file."""
    repos_root: str = ""
    """For a JSONL file: the directory holding the local repository snapshots."""
    task_ids: tuple[str, ...] = ()
    """Restrict to these instance ids (empty = all)."""
    max_turns: int = 30
    """Model messages per episode; the last one submits automatically."""
    max_calls_per_turn: int = 4
    """Tool calls executed from one message; extra ones are reported as skipped."""
    observation_limit: int = 6000
    """Characters of one observation; longer ones are cut with a visible marker."""
    eval_timeout_s: float = 60.0
    """Wall-clock limit of the hidden-test run."""
    test_timeout_s: float = 60.0
    """Wall-clock limit of the run_tests tool."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """Limits of the episode's sandbox (and of the reward's)."""

    def __post_init__(self) -> None:
        if isinstance(self.sandbox, dict):
            self.sandbox = SandboxConfig(**self.sandbox)
        self.task_ids = tuple(self.task_ids)
        for name in ("max_turns", "max_calls_per_turn", "observation_limit", "eval_timeout_s", "test_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SWE env {name}={getattr(self, name)!r}: must be > 0")
        if self.tasks.endswith(".jsonl") and not self.repos_root:
            raise ValueError(f"SWE env tasks={self.tasks!r} is a JSONL file: set repos_root to its snapshots")


def require_pytest() -> None:
    """The repositories' tests run under pytest, which the sandbox copies from this Python's installed packages
    (``SandboxConfig.python_packages``) and runs with the sandbox's own python3: a one-line ConfigError naming
    the extra where it is not installed."""
    if importlib.util.find_spec("pytest") is None:
        raise ConfigError("the SWE env runs the repositories' tests with pytest, copied into its sandbox from the "
                          "Python running rollart, where it is not installed: pip install -e \".[swe]\" "
                          "(or pip install pytest)")


def load_tasks(cfg: SWEEnvConfig) -> list[SWETask]:
    if cfg.tasks == "builtin":
        tasks = load_builtin_tasks()
    elif cfg.tasks.endswith(".jsonl"):
        tasks = load_swebench_jsonl(cfg.tasks, cfg.repos_root)
    else:
        tasks = load_builtin_tasks(Path(cfg.tasks))
    if cfg.task_ids:
        known = {t.instance_id for t in tasks}
        unknown = [t for t in cfg.task_ids if t not in known]
        if unknown:
            raise ValueError(f"SWE env task_ids {unknown} not in {cfg.tasks}; known: {sorted(known)[:10]}...")
        tasks = [t for t in tasks if t.instance_id in cfg.task_ids]
    return tasks


class SWEEnv(EnvDefaults, gym.Env):
    """Text-in, text-out SWE env over a sandboxed repository copy."""

    metadata = {"render_modes": ["ansi"]}
    tools = TOOL_SCHEMAS
    system_prompt = ("You are a careful software engineer. Investigate the repository with the tools, fix the "
                     "issue with minimal changes, run the tests, then submit.")
    max_new_tokens = 1024

    def __init__(self, config: SWEEnvConfig | None = None, render_mode: str | None = None, **overrides) -> None:
        cfg = config or SWEEnvConfig()
        self.config = dataclasses.replace(cfg, **overrides) if overrides else cfg
        require_pytest()
        self.tasks = load_tasks(self.config)
        resolve_mode(self.config.sandbox.mode)  # no isolation here: refuse now, in one line, not once per episode
        self.render_mode = render_mode
        self.observation_space = AnyText(max_length=max(self.config.observation_limit, 64 << 10), min_length=1)
        self.action_space = AnyText(max_length=1 << 20, min_length=1)
        self.task: SWETask | None = None
        self.sandbox: Sandbox | None = None
        self.tool_runner: SWETools | None = None
        self.turn = 0
        self.done = True
        self.last_eval: EvalResult | None = None
        self.timings: dict[str, float] = {}
        """Wall-clock seconds of the last reset or step (see the module docstring); kept out of ``info`` so that
        equal seeds and actions give equal infos."""
        self._last_obs = ""
        self._script: list[str] = []

    # -- gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        start = time.monotonic()
        self._teardown()
        options = options or {}
        if "task_id" in options:
            match = [t for t in self.tasks if t.instance_id == options["task_id"]]
            if not match:
                raise ValueError(f"reset(options={{'task_id': {options['task_id']!r}}}): unknown task; "
                                 f"known: {[t.instance_id for t in self.tasks][:10]}...")
            self.task = match[0]
        else:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.sandbox = Sandbox(self.config.sandbox, name=f"swe-{self.task.instance_id}")
        self.sandbox.copy_in(self.task.repo_dir)
        self.tool_runner = SWETools(self.sandbox, self.task.test_cmd, test_timeout_s=self.config.test_timeout_s)
        self.turn, self.done, self.last_eval = 0, False, None
        self._script = gold_patch_actions(self.task, run_tests=True)
        obs = INSTRUCTIONS.format(workspace=self.sandbox.paths.workspace, problem=self.task.problem_statement)
        self._last_obs = obs
        self.timings = {"env/reset_s": time.monotonic() - start}
        info = {"task_id": self.task.instance_id, "sandbox_mode": self.sandbox.mode,
                "test_files": len(suite_files(self.task))}
        return obs, info

    def step(self, action: str):
        if self.done or self.sandbox is None:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        start = time.monotonic()
        self.turn += 1
        parts: list[str] = []
        names: list[str] = []
        errors = 0
        submitted = False
        try:
            calls = parse_tool_calls(action)
        except ToolCallError as e:
            calls, errors = [], 1
            parts.append(f"error: {e}")
        for i, call in enumerate(calls):
            if i >= self.config.max_calls_per_turn:
                parts.append(f"[{len(calls) - i} more tool call(s) skipped: at most "
                             f"{self.config.max_calls_per_turn} per message]")
                break
            names.append(call.name)
            result = self.tool_runner.call(call.name, call.arguments)
            errors += result.error
            parts.append(result.text if len(calls) == 1 else f"[{call.name}]\n{result.text}")
            if result.submit:
                submitted = True
                break
        timings = {}
        reward = 0.0
        auto = not submitted and self.turn >= self.config.max_turns
        if submitted or auto:
            eval_start = time.monotonic()
            try:
                self.last_eval = evaluate(self.task, self.sandbox.workspace, self.config.sandbox,
                                          timeout_s=self.config.eval_timeout_s)
            except Exception as e:  # noqa: BLE001 - a broken task must cost one episode, not the run
                log.exception("evaluating %s failed", self.task.instance_id)
                self.last_eval = EvalResult(0.0, fail_to_pass_passed=0.0, pass_to_pass_passed=0.0,
                                            error=f"evaluation failed: {type(e).__name__}: {e}")
            timings["env/eval_s"] = time.monotonic() - eval_start
            reward = self.last_eval.reward
            parts.append(f"[episode over: {'submitted' if submitted else 'turn limit reached, auto-submitted'}; "
                         f"hidden tests {'passed' if reward == 1.0 else 'failed'}]")
            self.done = True
        elif not calls:
            parts.append(FORMAT_HINT)
        obs = truncate_text("\n".join(parts), self.config.observation_limit)
        self._last_obs = obs
        info = {"task_id": self.task.instance_id, "turn": self.turn, "tool_calls": names, "tool_errors": errors}
        if self.last_eval is not None:
            ev = self.last_eval
            info.update(success=reward == 1.0, auto_submitted=auto, fail_to_pass_passed=ev.fail_to_pass_passed,
                        pass_to_pass_passed=ev.pass_to_pass_passed, test_outcomes=ev.outcomes,
                        eval_error=ev.error)
        if self.done:
            self._teardown()
        timings["env/step_s"] = time.monotonic() - start
        self.timings = timings
        return obs, reward, self.done, False, info

    def render(self):
        return self._last_obs if self.render_mode == "ansi" else None

    # -- hooks for `python -m rollart.rollout.play` ----------------------------------------------
    def scripted_action(self, observation: str) -> str:
        """The gold-patch agent: the next tool call that applies this task's gold patch, then submit."""
        return self._script.pop(0) if self._script else format_tool_call("submit")

    def sample_action(self, rng) -> str:
        """A random exploring call (never a fix): list, view, grep, run the tests, or submit."""
        choices = [format_tool_call("bash", command="ls -R | head -50"), format_tool_call("view", path="README.md"),
                   format_tool_call("bash", command="grep -rn 'def ' --include=*.py . | head -30"),
                   format_tool_call("run_tests"), format_tool_call("submit"), "I am not sure what to do."]
        return choices[int(rng.integers(len(choices)))]

    def close(self) -> None:
        self._teardown()

    def _teardown(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        self.sandbox, self.tool_runner = None, None

    def __del__(self) -> None:
        try:
            self._teardown()
        except Exception:
            pass


FILE_TOOLS = {"view", "create", "edit"}


def step_action(action: str, turn: int, max_turns: int, reset_info: dict) -> tuple[str, int]:
    """What an env step with ``action`` runs, for the action scheduler (TaskSpec.step_action): the hidden
    test run when the message submits (or the turn limit auto-submits), splittable over the suite's test
    files; the visible test run for run_tests; a file operation (view / create / edit: no process) holds no
    core; else a sandbox command. Returns (kind, most cores)."""
    try:
        names = [c.name for c in parse_tool_calls(action)]
    except ToolCallError:
        names = []
    if "submit" in names or turn + 1 >= max_turns:
        return "test_run", max(1, int(reset_info.get("test_files", 1)))
    if "run_tests" in names:
        return "test_run", 1
    if not names:
        return "no_tool_call", 0  # answered with the format hint: nothing runs
    if set(names) <= FILE_TOOLS:
        return "file_op", 0  # the env host reads / writes the workspace itself: no process, no core
    return "sandbox_command", 1
