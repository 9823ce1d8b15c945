"""The read-only toolchain a sandbox sees besides /usr: a few pure-Python packages and our harness.

They are copied once per machine into ``<sandbox root>/toolchain-<key>/`` (world-readable, bound
read-only into every sandbox), so a sandbox never binds anything from the project tree or the
virtualenv (where this machine keeps them), and the dropped-privilege sandbox uid can read them.

The key hashes the packages' and harness files' paths and mtimes, so every new virtualenv (CI builds
a fresh one per run), reinstall, harness edit or layout bump makes a new copy. A process holds a
shared ``flock`` on ``<root>/locks/toolchain-<key>.lock`` for as long as it may start sandboxes on
that copy; building a new copy retires every other one nobody holds (and build or delete leftovers of
crashed processes), so superseded copies do not pile up while one that a live process uses is never
pulled from under it. The lock files live in a 0700 directory no sandboxed command can reach.
"""
from __future__ import annotations

import compileall
import errno
import fcntl
import functools
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from rollart.sandbox.limits import cleanup_stale_cgroups

HARNESS_DIR = Path(__file__).with_name("harness")
log = logging.getLogger(__name__)
LAYOUT_VERSION = 2  # bump when the toolchain's layout or contents change
_COPY = re.compile(r"toolchain-[0-9a-f]{16}")  # a finished copy (a sandbox dir is <name>-<pid>-<n>)
_BUILD = re.compile(r"\.(toolchain-[0-9a-f]{16})-[a-z0-9_]+")  # a copy being built (mkdtemp suffix)


def _package_paths(names: tuple[str, ...]) -> list[Path]:
    paths = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None and not spec.submodule_search_locations:
            log.warning("sandbox python_packages: %r is not installed here; sandboxed code cannot import it "
                        "(pip install %s)", name, name)
            continue
        if spec.submodule_search_locations:
            paths.append(Path(list(spec.submodule_search_locations)[0]))
        else:
            paths.append(Path(spec.origin))
    return paths


@functools.lru_cache(maxsize=None)
def prepare_toolchain(root: Path, packages: tuple[str, ...]) -> Path:
    """Return the toolchain dir for these packages, building it on first use (atomic rename).

    The dir stays locked (shared) for the life of this process; other copies nobody holds are removed.
    """
    cleanup_stale(root)
    sources = _package_paths(packages)
    digest = hashlib.sha256(f"v{LAYOUT_VERSION}".encode())
    for p in sources + sorted(HARNESS_DIR.iterdir()):
        digest.update(str(p).encode())
        digest.update(str(p.stat().st_mtime_ns).encode())
    target = root / f"toolchain-{digest.hexdigest()[:16]}"
    held = target in _held
    if not held:  # hold it before looking: a sweeper may be deleting it right now
        try:
            _held[target] = _hold(root, target.name)
            held = True
        except OSError as e:  # no flock on this filesystem: keep every copy rather than risk one in use
            log.warning("sandbox: cannot lock %s (%s); superseded toolchain copies will not be removed "
                        "(put sandbox root_dir on a local filesystem)", target, e)
    if not target.is_dir():
        _build(root, target, sources)
    if held:
        try:
            retire_toolchains(root)
        except OSError as e:  # housekeeping must never stop a sandbox from starting
            log.warning("sandbox: could not remove old toolchain copies in %s: %s", root, e)
    return target


_held: dict[Path, int] = {}
"""toolchain dir -> fd of its shared lock, kept open (and so held) until this process exits."""


def _lock_path(root: Path, name: str) -> Path:
    locks = root / "locks"
    locks.mkdir(mode=0o700, exist_ok=True)
    os.chmod(locks, 0o700)  # no sandbox uid may take (and so pin or stall on) these locks
    return locks / f"{name}.lock"


def _lock(path: Path, flags: int) -> int | None:
    """An fd holding ``flags`` (LOCK_SH / LOCK_EX [| LOCK_NB]) on the lock file at ``path`` as it is now,
    or None if LOCK_NB and it is taken. Retries when a sweeper unlinked the file we had opened."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, flags)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # we locked a file a sweeper had just unlinked: lock the current one instead


def _hold(root: Path, name: str) -> int:
    """Mark toolchain ``name`` in use by this process (blocks only while a sweeper is deleting it)."""
    return _lock(_lock_path(root, name), fcntl.LOCK_SH)


def _build(root: Path, target: Path, sources: list[Path]) -> None:
    # named after its target so a sweeper can tell whether a live process is still building it
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    (tmp / "site").mkdir()
    for src in sources:
        if src.is_dir():
            shutil.copytree(src, tmp / "site" / src.name, ignore=ignore)
        else:
            shutil.copy2(src, tmp / "site" / src.name)
    shutil.copytree(HARNESS_DIR, tmp / "harness", ignore=ignore)
    # precompile: sandboxed runs cannot write bytecode, and compiling pytest on every run costs ~1 s
    compileall.compile_dir(str(tmp / "site"), quiet=1, workers=1)
    for dirpath, dirnames, filenames in os.walk(tmp):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)
    try:
        os.rename(tmp, target)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)


def retire_toolchains(root: Path) -> list[str]:
    """Delete every toolchain copy no process holds, and leftovers of crashed builds; returns their names.

    A copy is first renamed out of the way under an exclusive lock, so nobody can start using a
    half-deleted one: a process that wanted it waits for the lock, sees it gone and builds it again.
    """
    removed = []
    entries = sorted(root.iterdir()) if root.is_dir() else []
    locks = root / "locks"
    orphan_locks = {p.name[:-len(".lock")] for p in locks.glob("toolchain-*.lock")} if locks.is_dir() else set()
    orphan_locks -= {e.name for e in entries}
    for entry in entries + [root / name for name in sorted(orphan_locks)]:
        name = entry.name
        if name.startswith(".trash-toolchain-"):  # a crashed sweeper's (or one being deleted now: harmless)
            shutil.rmtree(entry, ignore_errors=True)
            continue
        build = _BUILD.fullmatch(name)
        if build:
            owner = build.group(1)
        elif _COPY.fullmatch(name):
            owner = name
        else:
            continue
        path = _lock_path(root, owner)
        fd = _lock(path, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fd is None:
            continue  # in use, or being built, by a live process
        try:
            if entry.is_dir() and not entry.is_symlink():
                trash = root / f".trash-{name.lstrip('.')}-{os.getpid()}"
                os.rename(entry, trash)
                shutil.rmtree(trash, ignore_errors=True)
                removed.append(name)
            if owner == name or not (root / owner).exists():  # else the owner copy has its own turn
                path.unlink(missing_ok=True)
        finally:
            os.close(fd)
    if removed:
        log.info("sandbox: removed toolchain copies no process uses: %s", ", ".join(removed))
    return removed


def claim_sandbox_dir(path: Path) -> int:
    """Hold an exclusive lock on ``path``/.claim for the sandbox's life (closing the returned fd lets go).

    Whether a sandbox's dir is live is judged by this lock, not by its owner's pid alone: a pid from
    another PID namespace sharing this root, or a reused pid, must never get a live sandbox deleted."""
    fd = os.open(path / ".claim", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _claimed(path: Path) -> bool:
    try:
        fd = os.open(path / ".claim", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: leave it alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)  # also drops our lock if we got it


def cleanup_stale(root: Path) -> None:
    """Remove sandboxes (and their cgroups) left behind by processes that died without tearing them down."""
    cleanup_stale_cgroups()
    for entry in root.iterdir() if root.is_dir() else []:
        if entry.name.startswith("."):  # toolchain build/trash dirs: retire_toolchains() judges those
            continue
        parts = entry.name.rsplit("-", 2)
        if len(parts) != 3 or not parts[1].isdigit() or not entry.is_dir():
            continue
        pid = int(parts[1])
        try:
            os.kill(pid, 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        if _claimed(entry):
            continue
        ws = entry / "ws"
        if os.path.ismount(ws):
            subprocess.run(["umount", "-l", str(ws)], capture_output=True)
        shutil.rmtree(entry, ignore_errors=True)
