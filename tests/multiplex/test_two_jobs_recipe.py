"""The two-job recipe end to end through one shared training service and one shared inference worker (real
processes, envs, engine): a tiny-budget smoke run; each job's learning equal to its private run (Sync+, same
seeds: the same rewards at every step and the same losses up to float rounding); and the check that both jobs
still learn while sharing — last-quarter reward above first-quarter and a significant (one-sided p < 0.05)
upward reward trend, FrozenLake and GuessNumber."""
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path, *overrides, timeout=1500):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "recipes.multiplex_two_jobs", f"logdir={tmp_path}", *overrides],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    return proc.stdout, dict(kv.split("=", 1) for kv in last.split())


@pytest.mark.slow
def test_smoke_two_jobs_share_one_service(tmp_path):
    out, kv = run(tmp_path, "total_steps=2", "eval_episodes=1", timeout=900)
    assert kv["mode"] == "shared"
    assert "service: switches=" in out and "shared inference: switches=" in out
    assert "placement: lake -> train0 shift=0" in out and "placement: game -> train0 shift=5" in out  # Placer
    assert {"lake_success", "game_success"} <= set(kv)


@pytest.mark.slow
def test_both_jobs_learn_while_sharing(tmp_path):
    _, kv = run(tmp_path, "total_steps=16", "eval_episodes=2", "time_limit_s=2400", timeout=3000)
    for job in ("lake", "game"):
        assert float(kv[f"{job}_reward_last"]) > float(kv[f"{job}_reward_first"]), kv
        assert float(kv[f"{job}_slope"]) > 0 and float(kv[f"{job}_p"]) < 0.05, kv  # a real upward trend


@pytest.mark.slow
def test_each_job_learns_as_in_its_private_run(tmp_path, monkeypatch):
    """Sync+ with fixed seeds makes a job's batches independent of timing, so sharing both planes must leave
    every step's rewards identical and its policy loss equal within 1e-5 (float rounding of batched forwards);
    a request answered with the other job's weights would change the rewards from step 2 on (the jobs' weights
    differ after their first training step)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from recipes.multiplex_two_jobs import MultiplexRecipe, run as run_recipe
    out = {alone: asyncio.run(run_recipe(MultiplexRecipe(total_steps=3, eval_episodes=1, mode="sync", alone=alone,
                                                         logdir=str(tmp_path / str(alone)))))
           for alone in (True, False)}
    for job in ("lake", "game"):
        private, shared = out[True][job], out[False][job]
        assert len(shared["rewards"]) == len(private["rewards"]) == 3
        assert shared["rewards"] == private["rewards"], job
        assert shared["losses"] == pytest.approx(private["losses"], rel=1e-5, abs=1e-6), job
    assert out[False]["inference_switches"] >= 2  # the worker really alternated between the jobs
