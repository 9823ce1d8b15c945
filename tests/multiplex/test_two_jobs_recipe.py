"""The two-job recipe end to end through one shared training service (real processes, envs, engine):
a tiny-budget smoke run, and the check that both jobs still learn while sharing — last-quarter reward
above first-quarter and a significant (one-sided p < 0.05) upward reward trend, FrozenLake and GuessNumber."""
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
    assert "service: switches=" in out
    assert "placement: lake -> train0 shift=0" in out and "placement: game -> train0 shift=5" in out  # Placer
    assert {"lake_success", "game_success"} <= set(kv)


@pytest.mark.slow
def test_both_jobs_learn_while_sharing(tmp_path):
    _, kv = run(tmp_path, "total_steps=16", "eval_episodes=2", "time_limit_s=2400", timeout=3000)
    for job in ("lake", "game"):
        assert float(kv[f"{job}_reward_last"]) > float(kv[f"{job}_reward_first"]), kv
        assert float(kv[f"{job}_slope"]) > 0 and float(kv[f"{job}_p"]) < 0.05, kv  # a real upward trend
