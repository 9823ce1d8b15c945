"""Gymnasium's own checker (check_env) passes on every env registered under rollart/, sandboxed ones included."""
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from rollart.sandbox import SandboxUnavailable

ROLLART_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith(f"{envs.NAMESPACE}/"))
SANDBOXED = {"rollart/HumanEval-v0", "rollart/SWE-v0"}
"""Envs that run the model's code in rollart.sandbox: they refuse to start where no isolation works."""
ALLOWED_WARNINGS = ("No render fps was declared",)
"""Text envs render ANSI text, which has no frame rate; any other warning of the checker fails the test."""


def test_every_shipped_env_is_checked():
    assert set(envs.REGISTERED) <= set(ROLLART_IDS)
    assert SANDBOXED <= set(ROLLART_IDS), "envs.swe or envs.humaneval did not register (see the import warning)"
    assert len(ROLLART_IDS) >= 7


def _kwargs(env_id: str, folder) -> dict:
    """What an env needs beyond its registered defaults: Dataset-v0 plays the rows of a file."""
    if env_id != "rollart/Dataset-v0":
        return {}
    data = folder / "rows.jsonl"
    data.write_text('{"prompt": "What is 2 + 3?", "answer": "5"}\n{"prompt": "What is 4 * 4?", "answer": "16"}\n')
    return {"path": str(data), "source": "data", "heldout": 0}


@pytest.mark.parametrize("env_id", ROLLART_IDS)
def test_check_env_passes(env_id, tmp_path):
    try:
        env = gym.make(env_id, **_kwargs(env_id, tmp_path))
    except SandboxUnavailable as e:
        assert env_id in SANDBOXED, f"{env_id} needs the sandbox but is not listed in SANDBOXED"
        pytest.skip(f"{env_id} runs code in the sandbox, and no sandbox isolation works on this machine: {e}")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)  # raises AssertionError on a failed check (e.g. infos differ for one seed)
    finally:
        env.close()
    unexpected = [str(w.message) for w in caught if not any(a in str(w.message) for a in ALLOWED_WARNINGS)]
    assert not unexpected, unexpected
