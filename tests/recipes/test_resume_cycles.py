"""Kill -9 and --resume, again and again: across the cycles every row of a dataset epoch is trained exactly once.

The run (python -m recipes.grpo_math on a 24-row file, two groups a step, a checkpoint every step) is killed with
SIGKILL shortly after its checkpoints of steps 3, 6 and 9 appear, resumed each time, and then runs to its end. Its
last checkpoint's trained log (rows trained in the lineage the checkpoints prove) must hold each row of epoch 0
at most once, and the rows of epoch 0 not trained yet must be exactly the ones it deals next."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("datasets")
pytest.importorskip("math_verify")

from tests.recipes.test_grpo_math import tiny_model  # noqa: F401  (fixture)
from tests.recipes.test_recipes_smoke import ROOT

ROWS = 24


def _settings(tmp_path, model):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(ROWS + 2)))
    return [sys.executable, "-m", "recipes.grpo_math", f"model={model}", f"logdir={tmp_path}", "run_name=cycles",
            f"data={data}", "data.heldout=2", "data.max_new_tokens=8", "batch_groups=2", "rollout.group_size=2",
            "rollout.max_concurrency=8", "checkpoint_every=1", "keep_checkpoints=3", "total_steps=14",
            "eval_every=0", "eval_at_start=false", "eval_at_end=false", "actor_mode=inprocess", "quiet=true"]


def _newest_step(checkpoints) -> int:
    steps = [int(p.name.split("_")[1]) for p in checkpoints.glob("step_*") if (p / "COMPLETE").exists()]
    return max(steps, default=0)


def test_every_row_of_an_epoch_is_trained_once_across_kill_and_resume_cycles(tmp_path, tiny_model):  # noqa: F811
    command = _settings(tmp_path, tiny_model)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    checkpoints = tmp_path / "cycles" / "checkpoints"
    rng = random.Random(0)
    for i, kill_after in enumerate((3, 6, 9)):
        proc = subprocess.Popen(command + (["--resume"] if i else []), cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while _newest_step(checkpoints) < kill_after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for a checkpoint to exist, not timing anything
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()[-2000:]}"
        time.sleep(rng.uniform(0.0, 1.0))  # somewhere inside the next step, or its checkpoint write
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    done = subprocess.run(command + ["--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    newest = max(checkpoints.glob("step_*"), key=lambda p: p.name)
    state = json.loads((newest / "meta.json").read_text())["extra"]["rows"]["data"]
    trained = [row for epoch, row in state["trained"] if epoch == 0]
    pending = [row for row, epoch in state["again"] if epoch == 0]
    assert len(trained) == len(set(trained)), f"a row trained twice in epoch 0: {sorted(trained)}"
    assert not set(trained) & set(pending)
    if state["epoch"] > 0:  # epoch 0 was dealt out: each of its rows trained, or waiting to be dealt again
        assert sorted(trained + pending) == list(range(ROWS))
    assert len(state["trained"]) == 2 * 14  # two groups a step, fourteen steps in the surviving lineage
