"""Atomic checkpoints: write into a hidden temp folder, mark it complete, rename, then point ``latest``.

Layout under a checkpoint root::

    root/step_00000012/        one complete checkpoint (policy version 12)
        model/                 config.json + model.safetensors (HF-loadable via rollart.models)
        optimizer.pt           optimizer state
        rng_rank{r}.pt         python / numpy / torch RNG states of each rank
        meta.json              {"version", "extra": {data position, buffer meta, ...}}
        COMPLETE               written last, before the rename
    root/latest                text file naming the newest complete folder (replaced atomically)
    root/.tmp-step_00000013/   a save in progress (ignored, removed by the next save)

A ``kill -9`` at any instant leaves either the previous ``latest`` or the new one, never a partial
folder under a ``step_*`` name: the rename of a fully written, fsynced folder is the commit point.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import torch

COMPLETE = "COMPLETE"
LATEST = "latest"


def step_dir_name(version: int) -> str:
    return f"step_{version:08d}"


def _fsync_tree(folder: Path) -> None:
    for dirpath, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def save_atomic(root: str | Path, version: int, write: Callable[[Path], None], meta: dict,
                rank: int = 0, barrier: Callable[[], None] | None = None, keep_last: int = 3) -> Path:
    """Run ``write(tmp_folder)`` on every rank, then (rank 0) commit it as ``root/step_<version>``.

    ``barrier`` synchronises data-parallel ranks around the shared temp folder. Returns the final folder.
    """
    root = Path(root)
    final = root / step_dir_name(version)
    tmp = root / f".tmp-{final.name}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".tmp-*"):  # leftovers of a save that was killed
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    if barrier:
        barrier()
    write(tmp)
    if barrier:
        barrier()
    if rank == 0:
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
        _fsync_tree(tmp)
        (tmp / COMPLETE).write_text("ok\n")
        _fsync_tree(tmp)
        if final.exists():  # re-saving the same version: move the old one out of the way first
            old = root / f".tmp-old-{final.name}"
            os.rename(final, old)
            shutil.rmtree(old)
        os.rename(tmp, final)
        _fsync_dir(root)
        _write_text_atomic(root / LATEST, final.name + "\n")
        prune(root, keep_last)
    if barrier:
        barrier()
    return final


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE).is_file() and (folder / "meta.json").is_file()


def latest(root: str | Path) -> Path | None:
    """The newest complete checkpoint under ``root`` (via ``latest``, else by scanning), or None."""
    root = Path(root)
    pointer = root / LATEST
    if pointer.is_file():
        folder = root / pointer.read_text().strip()
        if is_complete(folder):
            return folder
    candidates = sorted((p for p in root.glob("step_*") if is_complete(p)), key=lambda p: p.name)
    return candidates[-1] if candidates else None


def resolve(path: str | Path) -> Path:
    """A checkpoint folder itself, or the latest complete one under a root; clear error otherwise."""
    path = Path(path)
    if is_complete(path):
        return path
    found = latest(path)
    if found is None:
        raise FileNotFoundError(f"no complete checkpoint in {path} (expected {path}/step_*/COMPLETE); "
                                "start without --resume or point to a checkpoint folder")
    return found


def read_meta(folder: Path) -> dict:
    return json.loads((folder / "meta.json").read_text())


def prune(root: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` complete checkpoints (0 keeps everything)."""
    if keep_last <= 0:
        return
    complete = sorted((p for p in root.glob("step_*") if is_complete(p)), key=lambda p: p.name)
    for old in complete[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def save_rng(folder: Path, rank: int) -> None:
    """Write this rank's RNG states into a checkpoint folder."""
    torch.save(rng_state(), folder / f"rng_rank{rank}.pt")


def restore_rng(folder: Path, rank: int) -> None:
    """Restore this rank's RNG states from a checkpoint folder, if it holds them."""
    path = folder / f"rng_rank{rank}.pt"
    if path.exists():
        set_rng_state(torch.load(path, weights_only=False))
