"""Atomic checkpoints: write into a hidden temp folder, mark it complete, rename, then point ``latest``.

Layout under a checkpoint root::

    root/step_00000012/        one complete checkpoint (policy version 12)
        model/                 config.json + model.safetensors (HF-loadable via rollart.models; with LoRA the
                               merged model, tokenizer included)
        adapter/               with LoRA: adapter_config.json + adapter_model.safetensors (PEFT's format)
        optimizer.pt           optimizer state
        rng_rank{r}.pt         python / numpy / torch RNG states of each rank
        meta.json              {"version", "extra": {data position, buffer meta, ...}}
        manifest.json          size and sha256 of every file above (written atomically, after them)
        COMPLETE               written last, before the rename
    root/latest                text file naming the newest complete folder (replaced atomically)
    root/.tmp-step_00000013/   a save in progress (ignored, removed by the next save)

A ``kill -9`` at any instant leaves either the previous ``latest`` or the new one, never a partial
folder under a ``step_*`` name: the rename of a fully written, fsynced folder is the commit point. A save that
fails before it (the disk filled up, a file grew past a size limit) removes its temp folder, so the space it took
is free again, and raises :class:`CheckpointWriteError`; the newest complete checkpoint is the one before.

Damage after the commit (a truncated or overwritten file, a disk fault) is caught by :func:`verify`, which
checks every file against ``manifest.json`` and names the first bad one; :func:`load_newest_intact` then falls
back to the newest older checkpoint that verifies. Checkpoints written before manifests existed carry none:
they are verified by loading them (:func:`load_file` names the file that fails).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
import torch

from rollart.config import one_line_error

COMPLETE = "COMPLETE"
LATEST = "latest"
MANIFEST = "manifest.json"

log = logging.getLogger("rollart.checkpoint")
T = TypeVar("T")


@one_line_error
class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message is one line naming the folder and the bad file."""


@one_line_error
class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (its partial folder is removed); the message is one line naming the
    folder, the cause, the space left there and the newest complete checkpoint."""


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
        try:
            tmp.mkdir()
        except OSError as e:
            _abandon(tmp, final, e)
    if barrier:
        barrier()
    try:
        write(tmp)
    except Exception as e:  # noqa: BLE001 - torch's writer reports a full disk as a RuntimeError without errno
        _abandon(tmp, final, e)
    if barrier:
        barrier()
    if rank == 0:
        try:
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
            _fsync_tree(tmp)
            write_manifest(tmp)
            (tmp / COMPLETE).write_text("ok\n")
            _fsync_tree(tmp)
        except OSError as e:
            _abandon(tmp, final, e)
        if final.exists():  # re-saving the same version: move the old one out of the way first
            old = root / f".tmp-old-{final.name}"
            os.rename(final, old)
            shutil.rmtree(old)
        os.rename(tmp, final)
        _fsync_dir(root)
        try:
            _write_text_atomic(root / LATEST, final.name + "\n")
        except OSError as e:  # committed all the same: without a pointer, readers scan for the newest folder
            log.warning("checkpoint %s saved, but %s not updated (%s); the newest folder is found by name",
                        final.name, root / LATEST, e)
            for stale in (root / LATEST, root / (LATEST + ".tmp")):
                stale.unlink(missing_ok=True)
        prune(root, keep_last)
    if barrier:
        barrier()
    return final


def _abandon(tmp: Path, final: Path, cause: BaseException) -> None:
    """Remove a save's temp folder (freeing what it took) and raise CheckpointWriteError naming the cause."""
    try:  # a full disk shows here where torch's own error does not say so
        free = f"{shutil.disk_usage(final.parent).free / 2**20:.1f} MiB were free there when it failed"
    except OSError:
        free = "free space unknown"
    shutil.rmtree(tmp, ignore_errors=True)
    newest = latest(final.parent)
    raise CheckpointWriteError(
        f"checkpoint {final.name} not written in {final.parent}: {type(cause).__name__}: {_first_line(cause)} "
        f"({free}); its partial folder was removed; the newest complete checkpoint is "
        f"{newest.name if newest else 'none'}") from cause


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


def candidates(root: str | Path) -> list[Path]:
    """Every complete checkpoint under ``root``, newest first (whether intact is for :func:`verify`)."""
    return sorted((p for p in Path(root).glob("step_*") if is_complete(p)), key=lambda p: p.name, reverse=True)


# ---------------------------------------------------------------------- manifest and verification
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _payload_files(folder: Path) -> list[str]:
    """Relative paths of the files a manifest covers: everything but the manifest and the COMPLETE marker."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and p.name not in (MANIFEST, COMPLETE, MANIFEST + ".tmp"))


def write_manifest(folder: Path) -> dict:
    """Record the size and sha256 of every file in ``folder`` in ``manifest.json`` (tmp file, fsync, rename)."""
    files = {rel: {"size": (folder / rel).stat().st_size, "sha256": _sha256(folder / rel)}
             for rel in _payload_files(folder)}
    manifest = {"format": 1, "files": files}
    _write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def has_manifest(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()


def verify(folder: str | Path) -> str | None:
    """The first problem of a checkpoint folder as one line naming the bad file, or None when it is intact.

    A folder without a manifest (written before manifests existed) is not checked here: None.
    """
    folder = Path(folder)
    if not has_manifest(folder):
        return None
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
        entries = [(rel, int(e["size"]), str(e["sha256"])) for rel, e in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"{folder / MANIFEST} is unreadable ({type(e).__name__}: {_first_line(e)})"
    for rel, size, digest in sorted(entries):
        path = folder / rel
        if not path.is_file():
            return f"{path} is missing"
        actual = path.stat().st_size
        if actual != size:
            return f"{path} has {actual} bytes, the manifest says {size} (truncated or overwritten)"
        if _sha256(path) != digest:
            return f"{path} does not match its sha256 checksum (corrupted)"
    return None


def check(folder: str | Path) -> Path:
    """``folder`` if it is a complete checkpoint that verifies; CheckpointError (one line) otherwise."""
    folder = Path(folder)
    if not is_complete(folder):
        raise CheckpointError(f"{folder} is not a complete checkpoint (no {COMPLETE} or meta.json)")
    problem = verify(folder)
    if problem:
        raise CheckpointError(f"checkpoint {folder.name} is corrupt: {problem}")
    return folder


def load_file(path: Path, loader: Callable[[Path], T]) -> T:
    """``loader(path)``, with any failure turned into a one-line CheckpointError naming the file (the check
    of a checkpoint without a manifest is that its files load)."""
    try:
        return loader(path)
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a damaged file makes torch/safetensors/json raise
        raise CheckpointError(f"cannot load {path}: {type(e).__name__}: {_first_line(e)}") from e


def load_newest_intact(root: str | Path, load: Callable[[Path], T]) -> tuple[Path, T, list[str]]:
    """``load(folder)`` for the newest checkpoint under ``root`` that verifies and loads, falling back to older
    ones. Returns (folder, what load returned, one line per checkpoint skipped); CheckpointError when none is
    intact. Each fallback is logged as one warning line."""
    found = candidates(root)
    if not found:
        raise CheckpointError(f"no complete checkpoint in {root} (expected {root}/step_*/{COMPLETE})")
    skipped: list[str] = []
    for i, folder in enumerate(found):
        try:
            return folder, load(check(folder)), skipped
        except CheckpointError as e:
            skipped.append(str(e))
            older = found[i + 1].name if i + 1 < len(found) else None
            log.warning("%s; %s", e, f"falling back to {older}" if older else "no older checkpoint left")
    raise CheckpointError(f"no intact checkpoint in {root}: {len(found)} tried, newest problem: {skipped[0]}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "(no message)"


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
    """meta.json of a checkpoint folder; CheckpointError naming it when it does not parse."""
    meta = load_file(folder / "meta.json", lambda p: json.loads(p.read_text()))
    if not isinstance(meta, dict) or "version" not in meta:
        raise CheckpointError(f"cannot load {folder / 'meta.json'}: no 'version' in it")
    return meta


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
        load_file(path, lambda p: set_rng_state(torch.load(p, weights_only=False)))
