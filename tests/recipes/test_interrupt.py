"""Covers Ctrl-C on a recipe: it ends with one line naming the checkpoint --resume continues from, actors gone."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from recipes.grpo_frozenlake import TASK, default_config
from recipes.launch import interrupted_message
from rollart.config import apply_overrides
from rollart.faults.procs import actor_processes
from rollart.pipeline import Coordinator

ROOT = Path(__file__).resolve().parents[2]


def test_message_without_a_checkpoint_says_so(tmp_path):
    cfg = apply_overrides(default_config(), [f"logdir={tmp_path}", "warmup_steps=0"])
    msg = interrupted_message(Coordinator(cfg, [TASK]))
    assert msg.startswith("interrupted: no checkpoint in") and "checkpoint_every=20" in msg


def test_ctrl_c_ends_with_the_checkpoint_to_resume(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    cmd = [sys.executable, "-m", "recipes.grpo_frozenlake", f"logdir={tmp_path}", "total_steps=1000", "batch_groups=1",
           "rollout.group_size=2", "rollout.max_concurrency=4", "eval_every=0", "checkpoint_every=1", "quiet=true", "warmup_steps=0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal
    try:
        latest = tmp_path / "grpo_frozenlake" / "checkpoints" / "latest"
        deadline = time.monotonic() + 240
        while not latest.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)  # wait for the first checkpoint (not a timing assertion)
        assert latest.exists(), "no checkpoint was written"
        assert len(actor_processes(proc.pid)) == 4  # trainer, weight store, inference worker, env host
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: --resume continues from ") and "/checkpoints/step_" in last, err[-3000:]
    assert "Traceback" not in err
    deadline = time.monotonic() + 60
    while actor_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)  # actor processes leave when their parent is gone
    assert not actor_processes(proc.pid)
