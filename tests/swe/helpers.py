"""Shared helpers for the SWE tests: run scripted episodes on the built-in suite in parallel."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from envs.swe.env import SWEEnv
from envs.swe.scripted import ScriptedAgent, run_episode
from rollart.sandbox import SandboxConfig

SANDBOX = SandboxConfig(timeout_s=30.0, disk_mb=32, memory_mb=512)


def play(task, actions, **env_kwargs):
    """One episode of ``task`` with a scripted agent; returns (reward, infos, env.last_eval)."""
    env = SWEEnv(task_ids=(task.instance_id,), sandbox=SANDBOX, **env_kwargs)
    try:
        reward, infos = run_episode(env, ScriptedAgent(actions), {"task_id": task.instance_id})
        return reward, infos, env.last_eval
    finally:
        env.close()


def play_all(tasks, make_actions, workers: int = 3):
    with ThreadPoolExecutor(workers) as ex:
        return dict(zip([t.instance_id for t in tasks], ex.map(lambda t: play(t, make_actions(t)), tasks)))
