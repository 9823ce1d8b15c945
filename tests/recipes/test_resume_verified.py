"""Covers --resume on damaged checkpoints in a real run: the bad file is named, the run falls back to the newest
intact checkpoint and continues from it, and with none intact the recipe stops with one line."""
import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollart.config import apply_overrides
from rollart.pipeline import Coordinator
from rollart.trainer.checkpoint import CheckpointError

from recipes.grpo_frozenlake import TASK, default_config

ROOT = Path(__file__).resolve().parents[2]
TINY = ["batch_groups=1", "rollout.group_size=2", "rollout.max_concurrency=4", "eval_episodes=1", "eval_every=0",
        "checkpoint_every=1", "quiet=true", "warmup_steps=0"]


def run(tmp_path, *overrides):
    cfg = apply_overrides(default_config(), [f"logdir={tmp_path}", *TINY, "actor_mode=inprocess",
                                                 "eval_at_end=false", *overrides])
    return asyncio.run(Coordinator(cfg, [TASK]).run())


def ckpts(tmp_path):
    return tmp_path / "grpo_frozenlake" / "checkpoints"


def test_resume_falls_back_past_a_corrupt_newest_checkpoint_then_stops_when_none_is_intact(tmp_path, caplog):
    run(tmp_path, "total_steps=3", "keep_checkpoints=2")
    assert sorted(p.name for p in ckpts(tmp_path).glob("step_*")) == ["step_00000002", "step_00000003"]
    bad = ckpts(tmp_path) / "step_00000003" / "rng_rank0.pt"
    bad.write_bytes(b"garbage" * 3)
    with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
        resumed = run(tmp_path, "total_steps=4", "keep_checkpoints=2", "--resume=true")
    warnings = [r.getMessage() for r in caplog.records if r.name == "rollart.pipeline"]
    assert any(str(bad) in w and "falling back to step_00000002" in w for w in warnings), warnings
    assert any("resumed from" in w and w.split(" at step")[0].endswith("step_00000002") for w in warnings)
    assert (resumed.steps, resumed.version) == (2, 4)  # steps 3 and 4 again, on top of step 2

    for folder in ckpts(tmp_path).glob("step_*"):
        (folder / "optimizer.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="none of the 2 checkpoint"):
        run(tmp_path, "total_steps=5", "--resume=true")


@pytest.mark.slow
def test_recipe_names_the_file_falls_back_and_stops_in_one_line(tmp_path):
    """The recipe as a user runs it: actor processes, so the trainer's error crosses a process boundary."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]), HF_HUB_OFFLINE="1")

    def recipe(*args):
        return subprocess.run([sys.executable, "-m", "recipes.grpo_frozenlake", f"logdir={tmp_path}", *TINY, *args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    assert recipe("total_steps=2").returncode == 0
    bad = ckpts(tmp_path) / "step_00000002" / "model" / "model.safetensors"
    bad.write_bytes(bad.read_bytes()[:100])
    out = recipe("--resume", "total_steps=3")
    assert out.returncode == 0, out.stderr[-2000:]
    [line] = [x for x in out.stderr.splitlines() if "falling back" in x]
    assert str(bad) in line and "step_00000001" in line
    for folder in ckpts(tmp_path).glob("step_*"):
        (folder / "meta.json").write_text("{")
    out = recipe("--resume", "total_steps=4")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: --resume: none of the")
