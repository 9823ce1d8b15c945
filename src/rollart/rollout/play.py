"""Play any registered text env without a model: a random or scripted agent, printed turn by turn.

    python -m rollart.rollout.play rollart/FrozenLake-v0 --import envs --episodes 3 --policy scripted
    python -m rollart.rollout.play mypkg/MyEnv-v0 --import mypkg --policy random

``--import`` names the module that registers the env id (``envs`` registers the shipped rollart/* envs).

The random agent uses the env's ``sample_action(rng)`` if it has one, else ``action_space.sample()``;
the scripted agent uses ``scripted_action(observation)`` (falling back to random). Prints a summary
line ``episodes=… mean_reward=… success_rate=… mean_turns=…`` last.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass

import gymnasium as gym
import numpy as np


@dataclass
class EpisodeResult:
    reward: float
    success: bool
    turns: int
    truncated: bool


def choose_action(env: gym.Env, observation: str, policy: str, rng: np.random.Generator) -> str:
    base = env.unwrapped
    if policy == "scripted" and hasattr(base, "scripted_action"):
        return str(base.scripted_action(observation))
    if hasattr(base, "sample_action"):
        return str(base.sample_action(rng))
    return str(env.action_space.sample())


def play_episode(env: gym.Env, policy: str, seed: int, rng: np.random.Generator,
                 max_turns: int = 100, echo=None) -> EpisodeResult:
    """One episode; ``echo(str)`` (e.g. print) sees every observation and action."""
    obs, info = env.reset(seed=seed)
    total, turns, terminated, truncated = 0.0, 0, False, False
    if echo:
        echo(f"--- episode seed={seed}\n{obs}")
    while not (terminated or truncated) and turns < max_turns:
        action = choose_action(env, obs, policy, rng)
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        turns += 1
        if echo:
            echo(f"> {action}\n{obs}\n  (reward {reward:+.2f}{', done' if terminated else ''})")
    return EpisodeResult(total, bool(info.get("success", total > 0)), turns, truncated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("env_id", help="a registered gymnasium id, e.g. rollart/FrozenLake-v0")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--policy", choices=["random", "scripted"], default="random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-turns", type=int, default=100, help="safety cap if the env never ends")
    parser.add_argument("--import", dest="modules", action="append", default=[],
                        help="module to import first (where your env is registered)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    args = parser.parse_args(argv)

    for module in args.modules:
        importlib.import_module(module)
    try:
        env = gym.make(args.env_id)
    except gym.error.Error as e:
        hint = "" if args.modules else " (--import the module that registers it, e.g. --import envs for rollart/*)"
        print(f"error: cannot make {args.env_id!r}: {e}{hint}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    echo = None if args.quiet else print
    results = [play_episode(env, args.policy, args.seed + i, rng, args.max_turns, echo)
               for i in range(args.episodes)]
    env.close()
    n = len(results)
    print(f"episodes={n} mean_reward={sum(r.reward for r in results) / n:.3f} "
          f"success_rate={sum(r.success for r in results) / n:.3f} "
          f"mean_turns={sum(r.turns for r in results) / n:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
