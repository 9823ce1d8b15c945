"""Covers actor faults in a real run (real processes, kill -9): trainer and weight store restart in place, an
env that kills its host fails only its trajectory, and a trainer with no restart left ends the recipe in one line."""
import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import crash_envs
import pytest
from recipes.grpo_frozenlake import TASK
from rollart.faults.procs import actor_processes
from rollart.pipeline import Coordinator
from rollart.rollout.env_manager import TaskSpec
from run_configs import SMALL_RUN, recipe_config

# Each starts a real run's processes (20-40 s on 2 shared cores): the trainer kill runs by default (it crosses
# checkpoints, the weight plane and the buffer), the others with -m slow.

ROOT = Path(__file__).resolve().parents[2]
RESTARTABLE = ["checkpoint_every=1", "env_hosts=0"]  # a checkpoint every step to go back to; envs in this process


async def kill_when(coordinator: Coordinator, role: str, ready: Callable[[], bool]) -> int:
    """Run the coordinator; once ``ready()`` holds, SIGKILL the process of its ``role`` actor."""
    run = asyncio.create_task(coordinator.run())
    while not ready() and not run.done():
        await asyncio.sleep(0.05)  # waiting for a state, not timing anything
    pid = getattr(coordinator.parts.actors, role).pid
    os.kill(pid, signal.SIGKILL)
    coordinator.result = await run
    return pid


async def kill_at_step(coordinator: Coordinator, role: str, step: int) -> int:
    """Run the coordinator; once it reached ``step``, SIGKILL the process of its ``role`` actor."""
    return await kill_when(coordinator, role, lambda: getattr(coordinator, "step", 0) >= step)


def test_a_killed_trainer_restarts_from_the_newest_checkpoint_and_the_run_finishes(tmp_path, caplog):
    co = Coordinator(recipe_config(tmp_path, *RESTARTABLE, "total_steps=5"), [TASK])
    with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
        pid = asyncio.run(kill_at_step(co, "trainer", 2))
    result = co.result
    assert co.parts.actors.trainer.restarts == 1 and co.parts.actors.trainer.pid != pid
    assert co.parts.recovery.counters["trainer_restarts"] == 1
    assert "is back from step_0000000" in caplog.text, caplog.text  # reloaded a checkpoint, not the initial weights
    assert "buffered samples newer than it:" in caplog.text
    assert result.version == 5 and [h["step"] for h in result.history] == [1, 2, 3, 4, 5]
    assert (tmp_path / "grpo_frozenlake" / "checkpoints" / "step_00000005").is_dir()


@pytest.mark.slow
def test_a_trainer_killed_under_a_background_push_restarts_and_the_run_finishes(tmp_path, caplog):
    """The overlapped loop trains on while the store fetches the last version (a ~2-s emulated push here): the trainer
    killed while that fetch is under way fails it; the version is dropped and the run replays from its checkpoint."""
    # checkpoints at even steps, the kill after step 3: it lands under the push, not under a checkpoint's save
    co = Coordinator(recipe_config(tmp_path, *RESTARTABLE, "checkpoint_every=2", "total_steps=5", "mode=async",
                                   "weight_push_bytes_per_s=2e6"), [TASK])  # the ~3.6-MB model: ~1.8 s a push

    def under_push() -> bool:  # step 3's version on its way to the store
        weights = getattr(getattr(co, "parts", None), "weights", None)
        push = weights._push if weights is not None else None
        return getattr(co, "step", 0) >= 3 and push is not None and not push.done()

    with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
        asyncio.run(kill_when(co, "trainer", under_push))
    assert "died under the background push of weight version" in caplog.text, caplog.text
    assert co.parts.recovery.counters["trainer_restarts"] == 1
    assert co.result.version == 5 and [h["step"] for h in co.result.history] == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_a_killed_weight_store_restarts_and_the_run_finishes(tmp_path):
    co = Coordinator(recipe_config(tmp_path, *RESTARTABLE, "total_steps=5"), [TASK])
    pid = asyncio.run(kill_at_step(co, "store", 2))
    assert co.parts.actors.store.restarts == 1 and co.parts.actors.store.pid != pid
    assert co.parts.recovery.counters["store_restarts"] == 1
    assert co.result.version == 5 and co.parts.actors.proxy.version == 5  # every version after the restart reached the workers


@pytest.mark.slow
def test_an_env_that_kills_its_host_fails_only_its_trajectory(tmp_path):
    marker = tmp_path / "crashed"
    task = TaskSpec(name="ExitOnce", env_id=crash_envs.ENV_ID, env_kwargs={"marker": str(marker)},
                    max_new_tokens=4, max_turns=2)
    cfg = recipe_config(tmp_path, *RESTARTABLE, "total_steps=3", "env_hosts=2", "env_imports=crash_envs",
                        "rollout.max_concurrency=2")
    co = Coordinator(cfg, [task])
    result = asyncio.run(co.run())
    assert marker.exists()  # an env host process did die inside step
    assert result.version == 3
    assert co.parts.scheduler.counters["failed"] == 1  # the other env of its group lived on the other host
    assert sum(h.restarts for h in co.parts.actors.env_pool.host_objects) == 1


@pytest.mark.slow
def test_a_trainer_with_no_restart_left_ends_the_recipe_in_one_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    args = [f"logdir={tmp_path}", "total_steps=1000", *SMALL_RUN[:5], "warmup_steps=0", "checkpoint_every=1", "quiet=true",
            "trainer_restarts=0"]
    proc = subprocess.Popen([sys.executable, "-m", "recipes.grpo_frozenlake", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        latest = tmp_path / "grpo_frozenlake" / "checkpoints" / "latest"
        while not latest.exists() and proc.poll() is None:
            subprocess.run(["sleep", "0.5"])  # wait for the first checkpoint (not a timing assertion)
        trainer = [p.pid for p in actor_processes(proc.pid) if p.name == "trainer-0"]
        assert trainer, f"no actor process trainer-0 under {proc.pid}"
        os.kill(trainer[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors == err.strip().splitlines()[-1:], err[-3000:]
    line = errors[0]
    assert "actor trainer-0 died: process" in line and "exited with code -9" in line
    expected = " ".join(["python -m recipes.grpo_frozenlake", *args, "--resume"])
    assert line.endswith(f"continue with: {expected}"), line
