"""rollart/HumanEval-v0: canonical solutions score 1.0 on all 164 problems; wrong, empty and hostile answers score 0."""
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import envs.humaneval
from envs.humaneval.env import HumanEvalEnv, build_program, extract_code
from envs.humaneval.scripted import canonical_answer, exit_early_answer, no_answer, wrong_answer
from rollart.sandbox import SandboxConfig, SandboxUnavailable
from tests.humaneval.problems import problems_or_skip

pytestmark = pytest.mark.usefixtures("sandbox_isolation")  # skips where no isolation works

PROBLEMS = problems_or_skip(module_level=True)
FAST_SANDBOX = SandboxConfig(timeout_s=20.0, disk_mb=8)


def _score(problems, answer_fn, **kw):
    env = HumanEvalEnv(sandbox=FAST_SANDBOX, **kw)
    out = {}
    try:
        for p in problems:
            env.reset(options={"task_id": p.task_id})
            obs, reward, term, trunc, info = env.step(answer_fn(p))
            out[p.task_id] = (reward, term, obs)
    finally:
        env.close()
    return out


def test_all_164_canonical_solutions_score_one_in_parallel():
    assert len(PROBLEMS) == 164
    chunks = [PROBLEMS[i::4] for i in range(4)]
    with ThreadPoolExecutor(4) as ex:
        results = {k: v for part in ex.map(lambda c: _score(c, canonical_answer), chunks) for k, v in part.items()}
    failed = {k: v[2][:300] for k, v in results.items() if v[0] != 1.0}
    assert not failed, failed
    assert all(term for _, term, _ in results.values())


@pytest.mark.parametrize("answer_fn", [wrong_answer, no_answer, exit_early_answer])
def test_bad_answers_score_zero(answer_fn):
    results = _score(PROBLEMS[:6], answer_fn)
    assert all(r == 0.0 and term for r, term, _ in results.values()), results


def test_multi_turn_feedback_then_fix():
    p = PROBLEMS[0]
    env = HumanEvalEnv(sandbox=FAST_SANDBOX, max_attempts=2, task_ids=(p.task_id,))
    try:
        obs, info = env.reset(seed=0)
        assert p.prompt in obs and env.timings["env/reset_s"] > 0 and "timings" not in info
        obs, r, term, _, info = env.step(wrong_answer(p))
        assert r == 0.0 and not term and "AssertionError" in obs and "attempt 1/2" in obs
        obs, r, term, _, info = env.step(canonical_answer(p))
        assert r == 1.0 and term and info["success"] and env.timings["env/step_s"] > 0
        with pytest.raises(RuntimeError):
            env.step("x")
    finally:
        env.close()


def test_completion_format_and_hostile_code_contained():
    p = PROBLEMS[2]
    assert extract_code("text\n```python\nx = 1\n```\nmore") == "x = 1\n"
    assert build_program(p, p.canonical_solution).startswith(p.prompt + p.canonical_solution)
    env = HumanEvalEnv(sandbox=SandboxConfig(timeout_s=2.0, disk_mb=8), max_attempts=3, task_ids=(p.task_id,))
    try:
        env.reset(options={"task_id": p.task_id})
        obs, r, *_ = env.step(p.canonical_solution)  # bare body continuing the prompt
        assert r == 1.0
        env.reset(options={"task_id": p.task_id})
        obs, r, term, *_ = env.step(f"```python\ndef {p.entry_point}(x):\n    while True: pass\n```")
        assert r == 0.0 and "timed out" in obs and not term
        obs, r, term, *_ = env.step("```python\nimport os\nprint(open('/etc/shadow').read())\n```")
        assert r == 0.0 and ("No such file" in obs or "Permission denied" in obs)
    finally:
        env.close()


def test_registration_and_unknown_ids():
    envs.humaneval.register()
    env = gym.make("rollart/HumanEval-v0", task_ids=("HumanEval/5",), sandbox=FAST_SANDBOX)
    try:
        obs, info = env.reset(seed=3)
        assert info["task_id"] == "HumanEval/5"
        _, r, term, _, _ = env.step(canonical_answer(PROBLEMS[5]))
        assert r == 1.0 and term
    finally:
        env.close()
    with pytest.raises(ValueError, match="HumanEval/0"):
        HumanEvalEnv(task_ids=("HumanEval/999",))
    with pytest.raises(ValueError, match="max_attempts"):
        HumanEvalEnv(max_attempts=0)


def test_play_cli_scripted(capsys):
    from rollart.rollout.play import main
    assert main(["rollart/HumanEval-v0", "--policy", "scripted", "--episodes", "3", "--quiet"]) == 0
    assert "mean_reward=1.000" in capsys.readouterr().out.strip().splitlines()[-1]


def test_env_refuses_to_start_without_isolation(no_isolation):
    with pytest.raises(SandboxUnavailable, match="install bubblewrap"):
        HumanEvalEnv(task_ids=(PROBLEMS[0].task_id,))
