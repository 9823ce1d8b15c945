"""recipes.grpo_agent: a smoke run end to end (actor processes, the gateway, the openai client agent), and
(slow) a short run in which the agent's success rises."""
import re

import pytest

pytest.importorskip("openai", reason="recipes.grpo_agent's agent uses the openai client: pip install -e '.[agent]'")

from test_recipes_smoke import run_recipe  # noqa: E402


def test_agent_recipe_smoke(tmp_path):
    out = run_recipe("recipes.grpo_agent", tmp_path)
    assert "sampled success by step: 1:" in out


@pytest.mark.slow
def test_agent_recipe_learns(tmp_path):
    out = run_recipe("recipes.grpo_agent", tmp_path, "total_steps=80", "batch_groups=4", "rollout.group_size=16",
                     "rollout.max_concurrency=64", "eval_episodes=8", "checkpoint_every=0")
    sampled = [float(s) for s in re.search(r"sampled success by step: (.*)", out).group(1).split(", ")
               for s in [s.split(":")[1]]]
    assert max(sampled[-3:]) >= sampled[0] + 0.3, out[-1500:]
