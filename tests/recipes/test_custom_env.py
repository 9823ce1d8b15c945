"""Covers the README's custom-env flow: a user's gymnasium env played and trained; a broken one stops the run."""
import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from recipes.launch import run
from rollart.pipeline import Coordinator, PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig

ROOT = Path(__file__).resolve().parents[2]

ECHO = '''
import gymnasium as gym


class EchoEnv(gym.Env):
    """Repeat the word shown; reward 1 when the answer contains it."""

    def __init__(self):
        self.observation_space = gym.spaces.Text(64, charset="abcdefghijklmnopqrstuvwxyz: ")
        self.action_space = gym.spaces.Text(64, charset="abcdefghijklmnopqrstuvwxyz ")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.word = ["cat", "dog", "sun"][int(self.np_random.integers(3))]
        return f"say: {self.word}", {}

    def step(self, action):
        ok = self.word in action
        return f"say: {self.word}", float(ok), ok, False, {"success": ok}
'''


def write_package(root: Path, name: str) -> None:
    pkg = root / name
    pkg.mkdir()
    (pkg / "echo.py").write_text(ECHO)
    (pkg / "__init__.py").write_text(textwrap.dedent(f'''
        import gymnasium as gym
        gym.register(id="{name}/Echo-v0", entry_point="{name}.echo:EchoEnv", max_episode_steps=4)
    '''))


def test_play_imports_the_package_that_registers_the_env(tmp_path):
    write_package(tmp_path, "my_pkg_play")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src"), str(ROOT)])}
    cmd = [sys.executable, "-m", "rollart.rollout.play", "my_pkg_play/Echo-v0", "--policy", "random", "--quiet"]
    unregistered = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert unregistered.returncode == 2 and "cannot make 'my_pkg_play/Echo-v0'" in unregistered.stderr
    proc = subprocess.run(cmd + ["--import", "my_pkg_play"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("episodes=1 mean_reward=")


def test_training_runs_on_a_user_registered_env(tmp_path, monkeypatch):
    write_package(tmp_path, "my_pkg_train")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_pkg_train  # noqa: F401  (registers my_pkg_train/Echo-v0, as the README's snippet does)

    task = TaskSpec(name="Echo", env_id="my_pkg_train/Echo-v0", max_new_tokens=16)
    cfg = PipelineConfig(total_steps=2, batch_groups=1, rollout=SchedulerConfig(group_size=2, max_concurrency=4),
                         eval_episodes=2,
                         actor_mode="inprocess", logdir=str(tmp_path / "runs"), run_name="echo", quiet=True)
    result = asyncio.run(Coordinator(cfg, [task]).run())
    assert result.steps == 2 and set(result.final_success) == {"Echo", "mean"}
    assert all("rollout/reward/Echo" in h for h in result.history)
    assert sum(h["rollout/failed"] for h in result.history) == 0  # the env ran: no trajectory failed


def test_an_env_that_never_works_stops_the_run_with_its_reason(tmp_path, monkeypatch):
    (tmp_path / "my_pkg_broken.py").write_text(ECHO.replace('return f"say: {self.word}", {}', 'return {"word": 1}, {}'))
    monkeypatch.syspath_prepend(str(tmp_path))
    gym.register(id="my_pkg_broken/Echo-v0", entry_point="my_pkg_broken:EchoEnv", max_episode_steps=4)
    task = TaskSpec(name="Broken", env_id="my_pkg_broken/Echo-v0", max_new_tokens=4)
    cfg = PipelineConfig(total_steps=2, batch_groups=1, rollout=SchedulerConfig(group_size=2, max_concurrency=4),
                         eval_episodes=1,
                         actor_mode="inprocess", logdir=str(tmp_path / "runs"), quiet=True)
    with pytest.raises(SystemExit) as e:
        run(cfg, [task])
    assert str(e.value).startswith("error: rollout stopped: ") and "returned a dict observation" in str(e.value)
