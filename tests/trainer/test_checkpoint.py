"""Covers atomic checkpoints: latest discovery, HF-loadable model, a save that runs out of room (no partial
folder left, the one before stays newest), and kill -9 of a real training process mid-save followed by --resume
(no corrupt latest, consistent versions, same result as an unbroken run)."""
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rollart.models import load_model
from rollart.trainer import TrainerConfig, checkpoint
from rollart.trainer.torch_trainer import TorchTrainer

from tiny_policy import make_model, make_trajectories

WORKER = Path(__file__).with_name("ckpt_worker.py")


def _run(*args, check=True):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, str(WORKER), *map(str, args)], env=env, check=check, timeout=240,
                          capture_output=True, text=True)


def _log(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_save_load_roundtrip_restores_everything(tmp_path):
    tr = TorchTrainer(TrainerConfig(num_threads=1, lr=1e-2), model=make_model(0))
    tr.train_step(make_trajectories())
    folder = Path(tr.save_checkpoint(str(tmp_path), extra={"data_position": 7, "buffer": {"n": 3}}))
    assert folder.name == "step_00000001" and checkpoint.latest(tmp_path) == folder
    assert (tmp_path / "latest").read_text().strip() == "step_00000001"
    hf = load_model(folder / "model")  # HF-format folder
    ids = torch.randint(0, 32, (2, 7))
    assert torch.allclose(hf(ids), tr.policy(ids), atol=1e-6)

    other = TorchTrainer(TrainerConfig(num_threads=1, lr=1e-2), model=make_model(9))
    extra = other.load_checkpoint(str(tmp_path))
    assert extra == {"data_position": 7, "buffer": {"n": 3}} and other.version == 1
    # identical next step: weights, Adam moments and step count were all restored
    batch = make_trajectories(seed=3)
    tr.train_step(batch)
    other.train_step(batch)
    for (k, a), (_, b) in zip(tr.policy.state_dict().items(), other.policy.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), k


def test_latest_ignores_incomplete_folders_and_prunes(tmp_path):
    assert checkpoint.latest(tmp_path) is None
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        checkpoint.resolve(tmp_path)
    for v in range(1, 6):
        checkpoint.save_atomic(tmp_path, v, lambda d: (d / "x").write_text("1"), {"version": v}, keep_last=3)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_00000003", "step_00000004", "step_00000005"]
    (tmp_path / "step_00000009").mkdir()  # a folder without COMPLETE (e.g. copied by hand, half done)
    (tmp_path / "latest").write_text("step_00000009\n")  # pointer to it: must not be trusted
    assert checkpoint.latest(tmp_path).name == "step_00000005"


def test_a_save_that_runs_out_of_room_leaves_no_partial_folder(tmp_path):
    """A real write() failure (this process's file-size limit: EFBIG, as a full disk gives ENOSPC)."""
    def write(n):
        return lambda d: (d / "x").write_bytes(b"1" * n)

    checkpoint.save_atomic(tmp_path, 1, write(1000), {"version": 1})
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
    try:
        with pytest.raises(checkpoint.CheckpointWriteError, match=r"checkpoint step_00000002 not written in .*: "
                           r"OSError: \[Errno 27\] File too large.* the newest complete checkpoint is step_00000001"):
            checkpoint.save_atomic(tmp_path, 2, write(1 << 17), {"version": 2})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_00000001"]
    assert checkpoint.latest(tmp_path).name == "step_00000001" and checkpoint.verify(tmp_path / "step_00000001") is None
    assert checkpoint.save_atomic(tmp_path, 2, write(1 << 17), {"version": 2}).name == "step_00000002"  # room again


def test_kill_9_mid_save_then_resume(tmp_path):
    total, hang_at = 6, 4
    ref_root, ref_log = tmp_path / "ref", tmp_path / "ref.jsonl"
    _run(ref_root, ref_log, total)

    root, log = tmp_path / "run", tmp_path / "run.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, str(WORKER), str(root), str(log), str(total), f"hang_at={hang_at}"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not (root / "HANGING").exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "worker never reached the save to kill"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    # the save of version 4 was in progress: its temp folder exists, latest still names version 3
    assert list(root.glob(".tmp-step_00000004"))
    assert checkpoint.latest(root).name == "step_00000003"
    assert checkpoint.read_meta(checkpoint.latest(root))["extra"]["data_position"] == 3

    _run(root, log, total, "resume")
    entries = _log(log)
    assert [e["version"] for e in entries] == [1, 2, 3, 4, 5, 6]  # step 4 lost once, redone once
    assert all(e["version"] == e["data_position"] for e in entries)
    assert not list(root.glob(".tmp-*"))
    assert entries == _log(ref_log)  # same RNG draws after resume as the unbroken run
    final, ref_final = load_model(checkpoint.latest(root) / "model"), load_model(checkpoint.latest(ref_root) / "model")
    for (k, a), (_, b) in zip(final.state_dict().items(), ref_final.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), k
