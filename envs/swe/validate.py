"""Validate SWE tasks: the gold patch (applied through the tools) must score 1, the untouched repo 0.

    python -m envs.swe.validate                                  # the built-in suite
    python -m envs.swe.validate tasks=my.jsonl repos_root=snaps/ # SWE-bench JSONL over local snapshots
    python -m envs.swe.validate task_ids=pager-1,roman-1 workers=2

Prints one line per task and ``tasks=… gold_ok=… base_fails=…`` last; exits 1 if any task is invalid.
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from envs.swe.env import SWEEnv, SWEEnvConfig, load_tasks
from envs.swe.scripted import ScriptedAgent, do_nothing_actions, gold_patch_actions, run_episode
from rollart.config import parse_overrides


@dataclass
class ValidateArgs:
    """What to validate."""

    tasks: str = "builtin"
    """"builtin", a suite directory, or an SWE-bench JSONL file."""
    repos_root: str = ""
    """Snapshot directory for a JSONL file."""
    task_ids: tuple[str, ...] = ()
    """Only these ids (empty = all)."""
    workers: int = 2
    """Tasks validated in parallel."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers={self.workers}: must be >= 1")


def validate(args: ValidateArgs) -> list[tuple[str, float, float, str]]:
    env_cfg = SWEEnvConfig(tasks=args.tasks, repos_root=args.repos_root, task_ids=tuple(args.task_ids))
    tasks = load_tasks(env_cfg)

    def one(task):
        env = SWEEnv(env_cfg)
        try:
            gold, _ = run_episode(env, ScriptedAgent(gold_patch_actions(task)), {"task_id": task.instance_id})
            gold_eval = env.last_eval
            base, _ = run_episode(env, ScriptedAgent(do_nothing_actions(task)), {"task_id": task.instance_id})
            bad = {k: v for k, v in gold_eval.outcomes.items() if v != "passed"}
            note = gold_eval.error or (f"gold fails {sorted(bad)}" if gold != 1.0 else "")
            return task.instance_id, gold, base, note
        finally:
            env.close()

    with ThreadPoolExecutor(args.workers) as ex:
        return list(ex.map(one, tasks))


def main(argv: list[str] | None = None) -> int:
    args = parse_overrides(ValidateArgs(), sys.argv[1:] if argv is None else argv)
    try:
        results = validate(args)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for tid, gold, base, note in results:
        print(f"{tid:24s} gold={gold:.0f} base={base:.0f} {note}")
    gold_ok = sum(g == 1.0 for _, g, _, _ in results)
    base_fails = sum(b == 0.0 for _, _, b, _ in results)
    print(f"tasks={len(results)} gold_ok={gold_ok} base_fails={base_fails}")
    return 0 if gold_ok == base_fails == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
