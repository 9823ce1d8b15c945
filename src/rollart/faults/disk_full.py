"""The disk fault: the disk under a short real run's checkpoints fills up, so a checkpoint write fails midway.

The run must survive it: the failed checkpoint leaves nothing that could be loaded (its partial folder is removed),
the checkpoint before stays the newest intact one, training goes on, and once the space is back the next
checkpoint is written; nothing accepted is lost.

How the disk fills, for real (the trainer's ``write()`` fails, nothing is mocked): as root, the run's checkpoint
folder is a small tmpfs of its own that a filler file fills up to the last MiB (``ENOSPC``); otherwise the trainer
process's file-size limit (``RLIMIT_FSIZE``, set with ``prlimit``) drops to one MiB (``EFBIG``).
"""
from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import time
from pathlib import Path

from rollart.faults.figures import Figure, ended, failed, steps_done
from rollart.faults.harness import Harness
from rollart.faults.procs import find_actor

FS_BYTES = 64 << 20
"""Size of the checkpoint folder's own filesystem: room for three checkpoints of the tiny model (~11 MiB each)."""
LEFT_BYTES = 1 << 20
"""Space left once the disk is full: a checkpoint starts writing, then fails."""


class SmallDisk:
    """A checkpoint folder whose disk fills and empties on demand: its own tmpfs, or the trainer's file-size
    limit where this process may not mount."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.mounted = False
        self.filler = folder / "filler"
        self.limited: tuple[int, tuple[int, int]] | None = None
        """(trainer pid, its file-size limit before) while the limit is lowered."""
        self.how = "the trainer's file-size limit (RLIMIT_FSIZE) lowered to 1 MiB (EFBIG)"

    def mount(self) -> None:
        """Mount the tmpfs (only as root; else the file-size limit stands in)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(self.folder)],
                              capture_output=True, text=True)
        self.mounted = done.returncode == 0
        if self.mounted:
            self.how = f"a {FS_BYTES >> 20} MiB tmpfs on the checkpoint folder, filled to its last MiB (ENOSPC)"

    def fill(self, writer: int) -> str:
        """Fill the disk up to its last MiB; or, without a disk of its own, limit the files process ``writer``
        writes to one MiB."""
        if self.mounted:
            st = os.statvfs(self.folder)
            size = st.f_bavail * st.f_frsize - LEFT_BYTES
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
            return f"disk filled: {size >> 20} MiB filler, {_free_mib(self.folder)} MiB left"
        before = resource.prlimit(writer, resource.RLIMIT_FSIZE)
        resource.prlimit(writer, resource.RLIMIT_FSIZE, (LEFT_BYTES, before[1]))
        self.limited = (writer, before)
        return f"pid {writer}: file-size limit {LEFT_BYTES >> 20} MiB"

    def free(self) -> str:
        if self.mounted:
            self.filler.unlink(missing_ok=True)
            return f"space back: {_free_mib(self.folder)} MiB free"
        if self.limited is not None:
            pid, before = self.limited
            self.limited = None
            try:
                resource.prlimit(pid, resource.RLIMIT_FSIZE, before)
            except ProcessLookupError:
                return f"pid {pid} is gone"
        return "file-size limit lifted"

    def unmount(self) -> None:
        if self.mounted and subprocess.run(["umount", str(self.folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(self.folder)], capture_output=True)
        self.mounted = False


def _free_mib(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize >> 20


async def _until(check, timeout_s: float = 90.0):
    """``check()``'s first truthy value, looked at every 0.1 s (the run goes on meanwhile); None past the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.1)
    return None


async def disk_full_ckpt(h: Harness) -> list[Figure]:
    """Checkpoints every ``h.steps // 3`` steps; the disk fills once the first is written and empties once the
    second has been tried: survived=1 when that second failed and left nothing, the first stayed the newest intact
    checkpoint, every step trained, the third was written, and nothing accepted was lost."""
    from rollart.trainer.checkpoint import candidates, is_complete, step_dir_name, verify

    every = max(1, h.steps // 3)
    cfg = h.config("disk_full_ckpt", checkpoint_every=every, total_steps=3 * every)
    root = cfg.run_dir / "checkpoints"
    disk = SmallDisk(root)
    first, second = root / step_dir_name(every), step_dir_name(2 * every)
    seen: dict = {}

    async def fill(coordinator) -> str:
        if not await _until(lambda: is_complete(first)):
            raise RuntimeError(f"{first.name} was not written")
        trainer = find_actor("TrainerActor")
        if trainer is None and not disk.mounted:
            raise RuntimeError("no live trainer process to limit")
        return disk.fill(trainer.pid if trainer else 0)

    async def free(coordinator) -> str:
        entry = await _until(lambda: next((e for e in coordinator.state.history if e["step"] == 2 * every
                                           and ("checkpoint" in e or "checkpoint_failed" in e)), None))
        seen["failed"] = (entry or {}).get("checkpoint_failed", "")
        newest = candidates(root)
        seen["newest"] = newest[0].name if newest and verify(newest[0]) is None else "none intact"
        seen["left"] = sorted(p.name for p in root.iterdir() if p.name.startswith((".tmp-", second)))
        return disk.free()

    disk.mount()
    try:
        out = await h.drive(cfg, hooks=[(every, fill), (2 * every, free)])
        after = [p.name for p in candidates(root) if verify(p) is None]
    finally:
        disk.free()
        disk.unmount()
    events = "; ".join(out.events) or "the run never reached the first checkpoint"
    if "failed" not in seen:
        return [failed("disk_full_ckpt_survived", ended(out) if not out.completed else "the disk was never freed",
                       f"{disk.how}; {events}; {out.error}", out.seconds)]
    a = out.accounts
    final = step_dir_name(3 * every)
    checks = {f"checkpoint {second} failed on the full disk": bool(seen["failed"]),
              "it left no partial folder": not seen["left"],
              f"{first.name} stayed the newest intact checkpoint": seen["newest"] == first.name,
              "every step trained": out.completed and out.steps >= cfg.total_steps,
              f"{final} written once the space was back": final in after}
    missing = [c for c, ok in checks.items() if not ok]
    how = (f"{disk.how}; {events}; the failure: {seen['failed'][:300] or 'none'}; newest intact then "
           f"{seen['newest']}, left behind {seen['left'] or 'nothing'}; intact at the end {after}; "
           f"{steps_done(out, cfg.total_steps)}; {a.describe()}")
    if missing:
        return [Figure("disk_full_ckpt_survived", "0", False, f"{how}; not shown: {', '.join(missing)}"
                       + (f"; the run ended: {out.error}" if out.error else ""), out.seconds, {"missing": missing})]
    return [Figure("disk_full_ckpt_survived", "1", a.lost == 0 and not a.overcounted, how, out.seconds,
                   {"missing": [], "lost": a.lost})]
