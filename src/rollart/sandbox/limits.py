"""Resource limits for sandboxed children: rlimits, per-sandbox cgroups, uid allocation, killing.

A sandbox owns (when we run as root) a private unprivileged uid and a pids+memory cgroup nested
under our own. Together they bound fork and memory bombs and let teardown find every process the
sandbox started, even ones that left the process group or the namespace's view.
"""
from __future__ import annotations

import errno
import logging
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

from rollart.cpus import pin_preexec
from rollart.sandbox.config import SandboxConfig

log = logging.getLogger(__name__)
CGROUP_ROOT = Path("/sys/fs/cgroup")


def rlimits(cfg: SandboxConfig) -> list[tuple[int, tuple[int, int]]]:
    """The rlimits every sandboxed process starts with (soft == hard: a command cannot raise them)."""
    cpu = int(cfg.cpu_seconds)
    return [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (cfg.memory_mb << 20, cfg.memory_mb << 20)),
        (resource.RLIMIT_NPROC, (cfg.max_processes, cfg.max_processes)),
        (resource.RLIMIT_FSIZE, (cfg.file_size_mb << 20, cfg.file_size_mb << 20)),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NOFILE, (256, 256)),
    ]


def make_preexec(cfg: SandboxConfig, uid: int | None, cgroup_procs: list[Path]):
    """Build the function run in the forked child before exec: join cgroups, set rlimits, drop to uid."""
    limits = rlimits(cfg)
    if uid is None:  # not root: RLIMIT_NPROC would count all of this user's processes
        limits = [lim for lim in limits if lim[0] != resource.RLIMIT_NPROC]

    procs_paths = [str(p) for p in cgroup_procs]
    pin = pin_preexec()  # the cores the action scheduler granted the step running on this thread, if any

    # Runs in the forked child of a possibly multi-threaded parent: only C-level calls, no Python
    # objects with locks (no open()/logging/imports), to keep the fork-without-exec window safe.
    def preexec() -> None:
        pid = str(os.getpid()).encode()
        for procs in procs_paths:
            fd = os.open(procs, os.O_WRONLY)
            os.write(fd, pid)
            os.close(fd)
        if pin is not None:  # before dropping to the uid: joining the CPU-quota cgroup needs root
            pin()
        for which, value in limits:
            resource.setrlimit(which, value)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    return preexec


class UidLease:
    """One unprivileged uid reserved for one sandbox via an O_EXCL lock file (safe across processes)."""

    def __init__(self, lock_dir: Path, cfg: SandboxConfig) -> None:
        lock_dir.mkdir(parents=True, exist_ok=True)
        start = (os.getpid() * 7919 + time.monotonic_ns()) % cfg.uid_count
        for i in range(cfg.uid_count):
            uid = cfg.uid_base + (start + i) % cfg.uid_count
            path = lock_dir / str(uid)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                if _stale(path):
                    path.unlink(missing_ok=True)
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            self.uid, self.path = uid, path
            return
        raise RuntimeError(f"no free sandbox uid in [{cfg.uid_base}, {cfg.uid_base + cfg.uid_count}); "
                           "raise sandbox uid_count or close unused sandboxes")

    def release(self) -> None:
        self.path.unlink(missing_ok=True)


def _stale(path: Path) -> bool:
    try:
        owner = int(path.read_text() or "0")
    except (OSError, ValueError):
        return False
    if owner <= 0:
        return False
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Cgroups:
    """pids + memory cgroups (v1) for one sandbox, created under the cgroups we ourselves are in."""

    def __init__(self, name: str, cfg: SandboxConfig) -> None:
        self.dirs: list[Path] = []
        if not cfg.use_cgroups or os.geteuid() != 0:
            return
        wanted = {"pids": {"pids.max": str(cfg.max_processes)},
                  "memory": {"memory.limit_in_bytes": str(cfg.memory_mb << 20)}}
        own = _own_cgroups()
        for controller, settings in wanted.items():
            base = CGROUP_ROOT / controller
            if controller not in own or not (base / "cgroup.procs").exists():
                continue
            path = base / own[controller].lstrip("/") / f"rollart-{name}"
            try:
                path.mkdir(parents=False, exist_ok=True)
                for key, value in settings.items():
                    (path / key).write_text(value)
                if controller == "memory":  # swap counts too, when the kernel accounts it
                    memsw = path / "memory.memsw.limit_in_bytes"
                    if memsw.exists():
                        try:
                            memsw.write_text(settings["memory.limit_in_bytes"])
                        except OSError:
                            pass
            except OSError as e:
                log.debug("cgroup %s unavailable: %s", path, e)
                _rmdir(path)
                continue
            self.dirs.append(path)

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            try:
                found.update(int(x) for x in procs.read_text().split())
            except OSError:
                pass
        return found

    def remove(self) -> None:
        for d in self.dirs:
            _rmdir(d)
        self.dirs = []


def cleanup_stale_cgroups() -> None:
    """Remove empty per-sandbox cgroups left by processes that died without tearing down."""
    if os.geteuid() != 0:
        return
    for controller, path in _own_cgroups().items():
        base = CGROUP_ROOT / controller / path.lstrip("/")
        if controller not in ("pids", "memory") or not base.is_dir():
            continue
        for d in base.glob("rollart-*-*-*"):
            pid = d.name.rsplit("-", 2)[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _rmdir(d)


def _own_cgroups() -> dict[str, str]:
    own = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                if c:
                    own[c] = path
    except OSError:
        pass
    return own


def _rmdir(path: Path) -> None:
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                return
            time.sleep(0.02)


def pids_of_uid(uid: int) -> set[int]:
    """Every live (non-zombie) process whose real uid is ``uid`` (seen in the host's /proc)."""
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                zombie = False
                for line in f:
                    if line.startswith("State:"):
                        zombie = line.split()[1] in ("Z", "X")
                    elif line.startswith("Uid:"):
                        if int(line.split()[1]) == uid and not zombie:
                            found.add(int(entry.name))
                        break
        except (OSError, ValueError):
            continue
    return found


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # field 4 (ppid); comm may hold spaces
                found.add(int(entry.name))
    return found


def kill_namespace(wrapper: subprocess.Popen, grace_s: float = 2.0) -> None:
    """SIGKILL the children of a namespace wrapper (bwrap, unshare): the PID namespace's init, and with it
    the whole namespace. The wrapper stays alive to reap it and then exits, so no zombie is left for a
    host PID 1 that may never reap (killing the wrapper first would orphan the init)."""
    if wrapper.poll() is not None:
        return
    for pid in _children(wrapper.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        wrapper.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.debug("sandbox wrapper %d still alive %.1fs after its namespace was killed", wrapper.pid, grace_s)


def kill_everything(pgid: int | None, uid: int | None, cgroups: Cgroups, rounds: int = 40) -> None:
    """SIGKILL the process group, every process of the sandbox uid and of its cgroups, until none remain."""
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for _ in range(rounds):
        targets = cgroups.pids()
        if uid is not None:
            targets |= pids_of_uid(uid)
        targets.discard(os.getpid())
        if not targets:
            return
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    log.warning("sandbox processes still alive after %d kill rounds (uid=%s)", rounds, uid)
