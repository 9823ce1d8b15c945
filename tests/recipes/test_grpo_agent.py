"""recipes.grpo_agent: a smoke run end to end (actor processes, the gateway, the openai client agent), and
(slow) a default run in which the agent learns the protocol (peek once, then answer a digit)."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("openai", reason="recipes.grpo_agent's agent uses the openai client: pip install -e '.[agent]'")

from test_recipes_smoke import ROOT, TINY  # noqa: E402


def run_agent_recipe(tmp_path, *overrides):
    """Like the smoke runner, keeping this interpreter's PYTHONPATH (where openai may have been installed)."""
    path = [str(ROOT / "src"), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run([sys.executable, "-m", "recipes.grpo_agent", f"logdir={tmp_path}", *TINY, *overrides],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("final_success=")
    return proc.stdout


def test_agent_recipe_smoke(tmp_path):
    out = run_agent_recipe(tmp_path)
    assert "sampled success by step: 1:" in out and "steps=1 " in out


@pytest.mark.slow
def test_agent_recipe_learns(tmp_path):
    """The recipe's defaults learn the protocol (sampled reward: never peeking earns 0, peeking then a digit 0.5).
    Reading the secret is not learned yet (greedy final_success 0.10 / 0.00 in two runs), so it is not asserted."""
    out = run_agent_recipe(tmp_path, "total_steps=80", "batch_groups=4", "rollout.group_size=16",
                           "rollout.max_concurrency=64", "eval_episodes=10", "checkpoint_every=0", "time_limit_s=1500")
    rewards = [float(s.split(":")[1]) for s in re.search(r"sampled reward by step: (.*)", out).group(1).split(", ")]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    # measured (defaults): reward 10-step means 0.04 -> 0.54 (seed 0), 0.04 -> 0.41 (seed 1)
    assert last >= first + 0.25, out[-1500:]
