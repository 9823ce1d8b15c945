"""CPU cores, the one place that pins: a process to cores, and the processes an action starts to the cores the
action scheduler granted it.

Disaggregation on one machine: the paper runs training and rollout on separate GPU clusters (RollArt
R4); a benchmark on one host gives each its own cores instead, so overlapping them buys what it buys on
separate hardware. ``ROLLART_CPUS="0"`` (or "0,2-3") in an actor's environment pins that actor process
(``pin_from_env``); ``pinned`` pins this process for a block.

The action scheduler grants an env step (or a test run) a core set; the env host runs the step on a thread
under :func:`on_cores`, and whatever that step starts as a child process (a sandbox command, a test run)
is placed on those cores by :func:`pin_preexec` before it executes: pinned (``os.sched_setaffinity``) and,
where this process may write a cgroup with a CPU controller, also held to a CPU quota of that many cores
(:class:`CpuLimit`: cgroup v2 ``cpu.max``, else the v1 ``cpu`` controller's CFS quota). Where neither is
writable, pinning alone applies and :func:`cpu_limit_line` says so.

A group is one entity to the kernel's fair scheduler: at the default weight, every action process in it
would share one process's worth of CPU against the other processes of a busy machine (a hidden SWE test run
took 1.7x as long in the group as pinned alone, at load 13 on 2 cores). So each group weighs as many
processes as it has cores (a core-set group: its cores; the parent group: all its groups' cores), which
restores the weight the actions' processes would have outside any group, and no more.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import threading
from typing import Callable, Iterator, Optional, Sequence

ENV_VAR = "ROLLART_CPUS"


def parse_cpus(spec: str) -> set[int]:
    """``"0,2-3"`` -> {0, 2, 3}; a clear error for anything else."""
    cpus: set[int] = set()
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ValueError(f"{ENV_VAR}={spec!r}: expected core numbers like '0' or '0,2-3'") from None
    if not cpus:
        raise ValueError(f"{ENV_VAR}={spec!r} names no core")
    return cpus


def format_cpus(cpus) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def pin_process(cpus: set[int]) -> set[int]:
    """Pin every thread of this process to ``cpus`` (threads started later inherit it); returns the
    previous affinity of the calling thread so it can be restored. Cores this machine lacks are an error."""
    previous = os.sched_getaffinity(0)
    allowed = set(range(os.cpu_count() or 1))
    if not cpus <= allowed:
        raise ValueError(f"cannot pin to cores {format_cpus(cpus)}: this machine has cores {format_cpus(allowed)} "
                         f"(available to this process: {format_cpus(previous)})")
    try:
        os.sched_setaffinity(0, cpus)  # the calling thread first: the kernel refuses cores a cpuset denies us
    except OSError:
        raise ValueError(f"cannot pin to cores {format_cpus(cpus)}: the cores available to this process are "
                         f"{format_cpus(previous)}") from None
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):  # a thread that just exited
            pass
    return previous


@contextlib.contextmanager
def pinned(cpus) -> Iterator[None]:
    """Pin this process to ``cpus`` for the block (no-op when empty), then restore the previous affinity."""
    previous = pin_process(set(cpus)) if cpus else None
    try:
        yield
    finally:
        if previous is not None:
            pin_process(previous)


def pin_from_env() -> None:
    """Actor processes call this first thing: honour ``ROLLART_CPUS`` if set."""
    spec = os.environ.get(ENV_VAR, "")
    if spec:
        pin_process(parse_cpus(spec))


_local = threading.local()
CGROUP_V2 = "/sys/fs/cgroup/unified"  # hybrid layout; "/sys/fs/cgroup" itself on a pure v2 host
CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"
PERIOD_US = 100_000
SHARES_V1, WEIGHT_V2 = 1024, 100  # one process's default weight (v1 cpu.shares, v2 cpu.weight)


@contextlib.contextmanager
def on_cores(cores: Optional[Sequence[int]]) -> Iterator[None]:
    """Within this block, processes started from this thread run on ``cores`` (None or empty: unpinned)."""
    before = getattr(_local, "cores", None)
    _local.cores = tuple(int(c) for c in cores) if cores else None
    try:
        yield
    finally:
        _local.cores = before


def granted_cores() -> Optional[tuple[int, ...]]:
    """The cores granted to the action running on this thread, if any."""
    return getattr(_local, "cores", None)


class CpuLimit:
    """One cgroup per granted core set, its CPU quota = that many cores; children join it before exec.

    Grants are exclusive, so two actions never hold the same core set at once and one group per set
    suffices. ``mode`` is ``"v2"``, ``"v1"`` or ``""`` (no writable CPU controller: pinning only)."""

    def __init__(self, base_name: Optional[str] = None):
        self.base_name = base_name or f"rollart-actions-{os.getpid()}"
        self.mode, self.base = self._probe()
        self._groups: dict[tuple[int, ...], str] = {}
        self._cores: set[int] = set()  # every core of a group so far: the parent group's weight
        self._lock = threading.Lock()

    def _probe(self) -> tuple[str, str]:
        if os.geteuid() != 0:
            return "", ""
        for root in (CGROUP_V2, "/sys/fs/cgroup"):
            try:
                with open(os.path.join(root, "cgroup.controllers")) as f:
                    if "cpu" not in f.read().split():
                        continue
                base = os.path.join(root, self.base_name)
                os.makedirs(base, exist_ok=True)
                with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
                return "v2", base
            except OSError:
                continue
        try:
            base = os.path.join(CGROUP_V1_CPU, self.base_name)
            os.makedirs(base, exist_ok=True)
            with open(os.path.join(base, "cpu.cfs_quota_us"), "w") as f:
                f.write("-1")
            return "v1", base
        except OSError:
            return "", ""

    def procs_file(self, cores: tuple[int, ...]) -> Optional[str]:
        """The ``cgroup.procs`` of the group capped at ``len(cores)`` cores (created on first use)."""
        if not self.mode:
            return None
        with self._lock:
            path = self._groups.get(cores)
            if path is None:
                path = os.path.join(self.base, "c" + "-".join(map(str, cores)))
                os.makedirs(path, exist_ok=True)
                quota = PERIOD_US * len(cores)
                if self.mode == "v2":
                    with open(os.path.join(path, "cpu.max"), "w") as f:
                        f.write(f"{quota} {PERIOD_US}")
                else:
                    with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
                        f.write(str(PERIOD_US))
                    with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
                        f.write(str(quota))
                _set_weight(self.mode, path, len(cores))
                self._groups[cores] = path
                self._cores.update(cores)
                _set_weight(self.mode, self.base, len(self._cores))
        return os.path.join(path, "cgroup.procs")

    def close(self) -> None:
        """Remove the (empty) groups; a group still holding a process stays until it exits."""
        for path in list(self._groups.values()) + ([self.base] if self.base else []):
            with contextlib.suppress(OSError):
                os.rmdir(path)
        self._groups.clear()


def _set_weight(mode: str, group: str, processes: int) -> None:
    """Give ``group`` the fair-scheduler weight of ``processes`` ungrouped processes."""
    if mode == "v2":
        with open(os.path.join(group, "cpu.weight"), "w") as f:
            f.write(str(min(10_000, WEIGHT_V2 * processes)))
    else:
        with open(os.path.join(group, "cpu.shares"), "w") as f:
            f.write(str(SHARES_V1 * processes))


_limit: Optional[CpuLimit] = None
_limit_lock = threading.Lock()


def cpu_limit() -> CpuLimit:
    """This process's :class:`CpuLimit` (probed once)."""
    global _limit
    with _limit_lock:
        if _limit is None:
            _limit = CpuLimit()
            atexit.register(_limit.close)
        return _limit


def cpu_limit_line(limit: Optional[CpuLimit] = None) -> str:
    """One line for the start of a run: how granted cores are enforced here."""
    mode = (limit or cpu_limit()).mode
    if mode == "v2":
        return "actions: granted cores are pinned and capped by a cgroup v2 cpu.max quota"
    if mode == "v1":
        return ("actions: granted cores are pinned and capped by a CFS quota in the cgroup v1 cpu controller "
                "(no cgroup v2 cpu controller is delegated here)")
    return "actions: no writable cgroup CPU controller (v2 or v1) here: granted cores are enforced by pinning only"


def pin_preexec(cores: Optional[tuple[int, ...]] = None) -> Optional[Callable[[], None]]:
    """A preexec step that pins the child to ``cores`` (default: this thread's grant) and puts it in the
    core set's CPU-quota cgroup where one is writable; None if unpinned."""
    cores = granted_cores() if cores is None else tuple(cores)
    if not cores:
        return None
    wanted = set(cores)
    try:
        procs = cpu_limit().procs_file(tuple(sorted(wanted)))
    except OSError:
        procs = None

    # runs in the forked child: C-level calls only
    def preexec() -> None:
        if procs is not None:
            fd = os.open(procs, os.O_WRONLY)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
        os.sched_setaffinity(0, wanted)
    return preexec
