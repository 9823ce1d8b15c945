"""Covers verified checkpoints: the manifest of sizes and checksums, naming the bad file, falling back to the
newest intact checkpoint, stopping when none is intact, and checkpoints written before manifests existed."""
import json
import logging
from pathlib import Path

import pytest
import torch

from rollart.trainer import TrainerConfig, checkpoint
from rollart.trainer.checkpoint import CheckpointError
from rollart.trainer.torch_trainer import TorchTrainer

from tiny_policy import make_model, make_trajectories

FILES = ["model/model.safetensors", "optimizer.pt", "meta.json", "rng_rank0.pt"]


def _trainer(seed=0):
    return TorchTrainer(TrainerConfig(num_threads=1, lr=1e-2), model=make_model(seed))


def _two_checkpoints(root: Path) -> TorchTrainer:
    tr = _trainer()
    for step in (1, 2):
        tr.train_step(make_trajectories(seed=step))
        tr.save_checkpoint(str(root), extra={"step": step})
    return tr


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _garble(path: Path) -> None:
    """Same size, different bytes in the middle: only the checksum can tell."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid: mid + 8] = bytes((b ^ 0x5A) for b in data[mid: mid + 8])
    path.write_bytes(bytes(data))


def test_manifest_records_every_file_with_size_and_checksum(tmp_path):
    _two_checkpoints(tmp_path)
    folder = tmp_path / "step_00000002"
    files = json.loads((folder / checkpoint.MANIFEST).read_text())["files"]
    assert set(FILES) <= set(files) and "model/config.json" in files
    assert files["optimizer.pt"]["size"] == (folder / "optimizer.pt").stat().st_size
    assert len(files["meta.json"]["sha256"]) == 64
    assert checkpoint.verify(folder) is None


@pytest.mark.parametrize("damage", [_truncate, _garble], ids=["truncated", "garbage"])
@pytest.mark.parametrize("rel", FILES)
def test_a_damaged_newest_file_is_named_and_the_older_checkpoint_loads(tmp_path, caplog, rel, damage):
    _two_checkpoints(tmp_path)
    damage(tmp_path / "step_00000002" / rel)
    problem = checkpoint.verify(tmp_path / "step_00000002")
    assert problem is not None and rel in problem and "\n" not in problem

    fresh = _trainer(seed=9)
    with caplog.at_level(logging.WARNING, logger="rollart.checkpoint"):
        extra = fresh.load_checkpoint(str(tmp_path))
    assert extra == {"step": 1} and fresh.version == 1
    [line] = [r.getMessage() for r in caplog.records]
    assert rel in line and "step_00000002" in line and "falling back to step_00000001" in line
    with pytest.raises(CheckpointError, match="step_00000002 is corrupt"):  # the folder itself: refused, one line
        _trainer().load_checkpoint(str(tmp_path / "step_00000002"))


def test_the_fallback_restores_the_older_state_exactly(tmp_path):
    reference = _trainer()
    reference.train_step(make_trajectories(seed=1))
    _two_checkpoints(tmp_path)
    _truncate(tmp_path / "step_00000002" / "optimizer.pt")
    resumed = _trainer(seed=9)
    resumed.load_checkpoint(str(tmp_path))
    batch = make_trajectories(seed=5)
    reference.train_step(batch)
    resumed.train_step(batch)  # weights and Adam moments of step 1, whatever the damaged step 2 held
    for (k, a), (_, b) in zip(reference.policy.state_dict().items(), resumed.policy.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), k


def test_no_intact_checkpoint_stops_with_one_line(tmp_path):
    _two_checkpoints(tmp_path)
    _truncate(tmp_path / "step_00000002" / "model" / "model.safetensors")
    _garble(tmp_path / "step_00000001" / "rng_rank0.pt")
    with pytest.raises(CheckpointError) as info:
        _trainer().load_checkpoint(str(tmp_path))
    assert "no intact checkpoint" in str(info.value) and "\n" not in str(info.value)


def test_missing_file_and_unreadable_manifest_are_named(tmp_path):
    _two_checkpoints(tmp_path)
    folder = tmp_path / "step_00000002"
    (folder / "optimizer.pt").unlink()
    assert checkpoint.verify(folder) == f"{folder / 'optimizer.pt'} is missing"
    (folder / checkpoint.MANIFEST).write_text("{not json")
    assert "manifest.json is unreadable" in checkpoint.verify(folder)


def _drop_manifests(root: Path) -> None:
    for m in root.glob(f"step_*/{checkpoint.MANIFEST}"):
        m.unlink()


def test_checkpoints_without_a_manifest_still_load(tmp_path):
    _two_checkpoints(tmp_path)
    _drop_manifests(tmp_path)  # as written before manifests existed
    fresh = _trainer(seed=9)
    assert fresh.load_checkpoint(str(tmp_path)) == {"step": 2} and fresh.version == 2


@pytest.mark.parametrize("rel", FILES)
def test_a_damaged_file_without_a_manifest_fails_its_load_naming_it(tmp_path, caplog, rel):
    _two_checkpoints(tmp_path)
    _drop_manifests(tmp_path)
    _truncate(tmp_path / "step_00000002" / rel)
    with pytest.raises(CheckpointError) as info:
        _trainer().load_checkpoint(str(tmp_path / "step_00000002"))
    message = str(info.value)
    assert message.startswith(f"cannot load {tmp_path / 'step_00000002' / rel}:") and "\n" not in message
    fresh = _trainer(seed=9)
    with caplog.at_level(logging.WARNING, logger="rollart.checkpoint"):
        assert fresh.load_checkpoint(str(tmp_path)) == {"step": 1}
    assert "falling back to step_00000001" in caplog.text


def test_a_save_killed_before_its_manifest_is_never_a_candidate(tmp_path):
    _two_checkpoints(tmp_path)
    half = tmp_path / ".tmp-step_00000003"  # what a kill -9 mid-save leaves
    half.mkdir()
    (half / "meta.json").write_text(json.dumps({"version": 3, "extra": {}}))
    assert [p.name for p in checkpoint.candidates(tmp_path)] == ["step_00000002", "step_00000001"]
