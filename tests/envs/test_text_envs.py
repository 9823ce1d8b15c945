"""The shipped text envs: FrozenLake rendering/actions/penalty, math tool, games, registration, play CLI."""
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.frozenlake import ansi_to_text, parse_action


def test_every_shipped_id_is_registered_under_the_namespace():
    for name in ["FrozenLake-v0", "FrozenLakeRandom-v0", "MathTool-v0", "GuessNumber-v0", "SortNumbers-v0"]:
        assert f"rollart/{name}" in gym.registry
        assert f"rollart/{name}" in envs.REGISTERED


def test_frozenlake_observation_is_plain_grid_with_agent_marked():
    env = gym.make("rollart/FrozenLake-v0")
    obs, info = env.reset(seed=0)
    assert obs == "PFFF\nFHFH\nFFFH\nHFFG"
    assert "\x1b" not in obs and info["success"] is False
    obs, reward, terminated, truncated, info = env.step("right")
    assert obs.splitlines()[0] == "SPFF" and reward == 0.0 and not terminated


def test_ansi_stripping_keeps_the_highlighted_cell():
    assert ansi_to_text("  (Down)\nSF\x1b[41mF\x1b[0mF\nFHFH\n") == "SFPF\nFHFH"


def test_frozenlake_actions_letters_words_and_invalid_penalty():
    assert [parse_action(a) for a in ["L", "d", " Right ", "UP.", "x", "LL"]] == [0, 1, 2, 3, None, None]
    env = gym.make("rollart/FrozenLake-v0", invalid_penalty=0.25)
    obs0, _ = env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("jump")
    assert reward == -0.25 and info["invalid"] and not terminated
    assert obs.startswith(obs0) and "Invalid action" in obs


def test_frozenlake_goal_gives_reward_one_and_success_hole_ends_with_zero():
    env = gym.make("rollart/FrozenLake-v0")
    env.reset(seed=0)
    for a in "DDRRD":
        env.step(a)
    obs, reward, terminated, _, info = env.step("R")
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env.reset(seed=0)
    env.step("R")
    _, reward, terminated, _, info = env.step("D")  # (1,1) is a hole
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_frozenlake_truncates_after_max_turns():
    env = gym.make("rollart/FrozenLake-v0")
    env.reset(seed=0)
    truncated = False
    for turn in range(12):
        _, _, terminated, truncated, _ = env.step("U")
        assert not terminated
    assert truncated


def test_random_map_depends_on_seed_and_spells_position():
    env = gym.make("rollart/FrozenLakeRandom-v0")
    maps = [env.reset(seed=s)[0] for s in (5, 5, 6, 7, 8)]
    assert maps[0] == maps[1]
    assert len(set(maps[1:])) > 1
    assert maps[0].splitlines()[-1].startswith("position r")


def test_math_tool_call_then_answer():
    env = gym.make("rollart/MathTool-v0")
    obs, info = env.reset(seed=1)
    answer = info["answer"]
    obs, reward, terminated, _, _ = env.step("Let me compute <calc>2 * (3 + 4)</calc>")
    assert obs == "Result: 14" and reward == 0 and not terminated
    obs, reward, terminated, _, _ = env.step("<python>__import__('os').system('true')</python>")
    assert obs.startswith("Tool error") and not terminated
    _, reward, terminated, _, info = env.step(f"So the answer is \\boxed{{{answer}}}.")
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_math_wrong_answer_ends_with_zero():
    env = gym.make("rollart/MathTool-v0")
    _, info = env.reset(seed=2)
    _, reward, terminated, _, info = env.step(f"Answer: {info['answer'] + 1}")
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_guess_number_feedback_and_single_turn_sort():
    env = gym.make("rollart/GuessNumber-v0")
    env.reset(seed=3)
    secret = env.unwrapped.secret
    assert "Higher" in env.step(str(secret - 1))[0]
    assert "Lower" in env.step(str(secret + 1))[0]
    assert env.step(f"I guess {secret}")[1:3] == (1.0, True)
    env = gym.make("rollart/SortNumbers-v0")
    obs, _ = env.reset(seed=4)
    nums = sorted(int(x) for x in obs.split(":")[1].split())
    assert env.step(" ".join(map(str, nums)))[1:3] == (1.0, True)
    env.reset(seed=4)
    assert env.step("1 2")[1:3] == (0.0, True)


@pytest.mark.parametrize("env_id", ["rollart/FrozenLake-v0", "rollart/FrozenLakeRandom-v0",
                                    "rollart/MathTool-v0", "rollart/GuessNumber-v0", "rollart/SortNumbers-v0"])
def test_scripted_play_solves_every_shipped_env(env_id):
    from rollart.rollout.play import play_episode
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    results = [play_episode(env, "scripted", seed, rng) for seed in range(5)]
    assert all(r.success for r in results)


def test_play_cli_runs_an_env_and_prints_a_summary():
    out = subprocess.run([sys.executable, "-m", "rollart.rollout.play", "rollart/GuessNumber-v0", "--import", "envs",
                          "--episodes", "4", "--policy", "random", "--quiet"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("episodes=4 ")
    bad = subprocess.run([sys.executable, "-m", "rollart.rollout.play", "rollart/FrozenLak-v0", "--import", "envs"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "FrozenLake" in bad.stderr
    unregistered = subprocess.run([sys.executable, "-m", "rollart.rollout.play", "rollart/GuessNumber-v0"],
                                  capture_output=True, text=True, timeout=60)
    assert unregistered.returncode == 2 and "--import envs" in unregistered.stderr


def test_random_start_plays_every_frozen_cell_over_consecutive_seeds():
    env = gym.make("rollart/FrozenLake-v0", random_start=True, invalid_hint=False)
    cells = env.unwrapped.start_cells()
    assert len(cells) == 11  # the 4x4 map: 16 cells less 4 holes and the goal
    starts = [tuple(env.reset(seed=10_000 + i)[1]["position"]) for i in range(len(cells))]
    assert sorted(r * 4 + c for r, c in starts) == cells
    assert env.reset(seed=5)[1]["position"] == env.reset(seed=5)[1]["position"]
    assert env.reset()[1]["position"] != [3, 3]  # seed None: still a frozen cell, never the goal


def test_frozenlake_random_moves_never_run_into_the_edge_and_cover_the_rest_evenly():
    """The random mover (format warm-up, play --policy random) draws among the moves its cell allows, so what it
    answers depends on where it is: from a corner two moves, from an edge three, inside four."""
    env = gym.make("rollart/FrozenLake-v0", random_start=True, invalid_hint=False).unwrapped
    rng = np.random.default_rng(0)
    expected = {(0, 0): "DR", (0, 3): "LD", (1, 0): "DRU", (2, 2): "LDRU", (3, 2): "LRU"}
    for seed in range(11):
        env.reset(seed=seed)
        if tuple(env.position) not in expected:
            continue
        allowed = expected.pop(tuple(env.position))
        assert sorted(env.moves_on_board()) == sorted(allowed)
        draws = [env.sample_action(rng) for _ in range(800)]
        counts = {a: draws.count(a) for a in "LDRU"}
        assert all(counts[a] == 0 for a in "LDRU" if a not in allowed), counts
        assert all(abs(counts[a] / 800 - 1 / len(allowed)) < 0.07 for a in allowed), counts
    assert not expected, f"cells not reached: {expected}"
