"""Covers learning end to end through the public API: the README's own-env example learns, runs reproduce, and
(slow) README command 1 and the snippet as written reach their scores."""
import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rollart.pipeline import Coordinator, PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

ROOT = Path(__file__).resolve().parents[2]


def write_readme_example(root: Path) -> dict[str, Path]:
    """The README's "Your own environment" code blocks, each written to the file its first line names."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Your own environment"):]
    section = section[:section.index("\n## ", 1)]
    files = {}
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        name = block.splitlines()[0].lstrip("# ").split()[0]
        files[name] = root / name
        files[name].parent.mkdir(parents=True, exist_ok=True)
        files[name].write_text(block)
    assert {"my_pkg/__init__.py", "train_walk.py"} <= set(files), sorted(files)
    return files


@pytest.fixture(scope="module")
def walk_env(tmp_path_factory):
    """Registers the README's me/Walk-v0 from the README's own text."""
    root = tmp_path_factory.mktemp("readme_env")
    write_readme_example(root)
    sys.path.insert(0, str(root))
    try:
        import my_pkg  # noqa: F401  (registers me/Walk-v0)
        yield root
    finally:
        sys.path.remove(str(root))


def small_run(tmp_path, run_name, **kw):
    """The README's task on a 4-cell corridor, actors in this process, synchronous, on a fixed seed."""
    task = TaskSpec(name="Walk", env_id="me/Walk-v0", env_kwargs={"length": 4}, max_new_tokens=1, max_turns=4)
    base = dict(total_steps=20, batch_groups=4, rollout=SchedulerConfig(group_size=16, max_concurrency=64),
                trainer=TrainerConfig(num_threads=1), mode="sync", seed=0, eval_every=5, eval_episodes=8,
                stop_at_success=0.9, actor_mode="inprocess", logdir=str(tmp_path), run_name=run_name, quiet=True)
    base.update(kw)
    return asyncio.run(Coordinator(PipelineConfig(**base), [task]).run())


def test_the_readme_env_learns(tmp_path, walk_env):
    """Random-init policy: greedy success 0 at the start (its answers are not moves); learning must take it to
    >= 0.9 on two evaluations in a row within 20 steps (seed 0: 1.0 at steps 2 and 4; about 6 CPU seconds)."""
    result = small_run(tmp_path, "learn", eval_at_start=True, eval_every=2, total_steps=20)
    assert result.evals[0] == (0, {"Walk": 0.0, "mean": 0.0}), result.evals
    assert result.final_success["Walk"] >= 0.9, result.evals
    assert result.steps < 20, f"target not held on two evaluations by step 20: {result.evals}"


def test_same_seed_same_metrics(tmp_path, walk_env):
    """Two runs with one seed sample the same tokens: equal rewards, successes, token counts and evaluations.
    Losses and the train/inference mismatch agree to float rounding only: the engine batches requests as they
    arrive and a batched forward's last bits depend on the batch, which reaches the log-probs the loss uses."""
    runs = [small_run(tmp_path, f"repro{i}", total_steps=3, eval_every=1, stop_at_success=None) for i in range(2)]
    assert runs[0].evals == runs[1].evals
    for a, b in zip(runs[0].history, runs[1].history, strict=True):
        for key in a:
            if key.startswith("system/") or key == "checkpoint":
                continue
            if key.startswith(("losses/", "mismatch/")):
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
            else:
                assert b[key] == a[key], (a["step"], key)
    assert len({h["rollout/reward_mean"] for h in runs[0].history}) > 1  # the runs did change the policy


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_readme_snippet_as_written_learns(tmp_path):
    """train_walk.py exactly as the README prints it (process actors, async, 60 steps)."""
    files = write_readme_example(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, str(files["train_walk.py"])], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 - the snippet prints a dict of floats
    assert final["Walk"] >= 0.9, proc.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_quickstart_reaches_its_score(tmp_path):
    """README command 1: final_success >= 0.9 on the 11 start cells, with the weights the run ends with."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "recipes.grpo_frozenlake", f"logdir={tmp_path}", "quiet=true"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("final_success=") and float(last.split("=")[1]) >= 0.9, proc.stdout[-2000:]
