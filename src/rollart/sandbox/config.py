"""Configuration of the command sandbox (limits, isolation mode, toolchain binds)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rollart.config import ConfigError

MODES = ("auto", "bwrap", "unshare", "rlimit")


@dataclass
class SandboxConfig:
    """Limits and isolation for commands an LLM wrote. Every field is a bound on a hostile command."""

    mode: str = "auto"
    """Isolation: "bwrap" (bubblewrap >= 0.8: user/mount/pid/net/ipc/uts namespaces, only the toolchain
    visible), "unshare" (the same namespaces and filesystem, built with util-linux), "rlimit" (a plain
    child with rlimits and a dropped uid: no isolation, warned about at start), or "auto" = bwrap, else
    unshare, else refuse to start. The chosen mode is logged."""
    timeout_s: float = 10.0
    """Wall-clock limit of one command; on expiry the whole sandbox (every process in it) is killed."""
    cpu_seconds: int = 10
    """RLIMIT_CPU per process (seconds of CPU time)."""
    memory_mb: int = 1024
    """RLIMIT_AS per process, and the memory cgroup limit of the whole sandbox when cgroups work."""
    max_processes: int = 64
    """RLIMIT_NPROC of the sandbox uid, and the pids cgroup limit when cgroups work (fork bombs)."""
    file_size_mb: int = 32
    """RLIMIT_FSIZE: largest file a command may write."""
    disk_mb: int = 128
    """Size of the workspace tmpfs (when running as root); also the total size accepted from a copy."""
    tmp_mb: int = 32
    """Size of each of the private /tmp and /dev/shm tmpfs of a sandboxed command (namespace modes)."""
    output_limit_bytes: int = 16384
    """Command output kept (stdout and stderr merged); the rest is dropped behind a visible marker."""
    use_cgroups: bool = True
    """Put each sandbox in its own pids/memory cgroup (v1, nested under our own) when writable."""
    workspace_tmpfs: bool = True
    """Back each workspace with a size-limited tmpfs when we may mount (root); bounds disk filling."""
    root_dir: str = ""
    """Host directory holding the sandboxes; empty = <system temp>/rollart-sandbox. Never under the project."""
    python_packages: tuple[str, ...] = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py")
    """Pure-Python packages (found in this interpreter) bound read-only at /opt/rollart/site."""
    python_home: str = ""
    """A Python installation (its prefix) to use instead of /usr/bin/python3; bound read-only at
    /opt/python (bwrap mode) and put first on PATH. It must be readable by unprivileged users."""
    extra_ro_binds: dict = field(default_factory=dict)
    """Additional host paths bound read-only, {host_path: sandbox_path} (e.g. a toolchain)."""
    uid_base: int = 1_600_000
    """First of the unprivileged uids given one per live sandbox when we run as root."""
    uid_count: int = 4096
    """How many uids the allocator may hand out."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"sandbox mode={self.mode!r}: expected one of {MODES}")
        for name in ("timeout_s", "cpu_seconds", "memory_mb", "max_processes", "file_size_mb",
                     "disk_mb", "tmp_mb", "output_limit_bytes", "uid_count"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"sandbox {name}={getattr(self, name)!r}: must be > 0")
        if self.memory_mb < 64:
            raise ConfigError(f"sandbox memory_mb={self.memory_mb}: at least 64 is needed to start python")
        project = str(Path(__file__).resolve().parents[3])
        if self.root_dir and str(Path(self.root_dir).resolve()).startswith(project):
            raise ConfigError(f"sandbox root_dir={self.root_dir!r}: must not be inside the project ({project})")
        if self.python_home and not Path(self.python_home, "bin", "python3").exists():
            raise ConfigError(f"sandbox python_home={self.python_home!r}: no bin/python3 there")
        if self.uid_base < 1000:
            raise ConfigError(f"sandbox uid_base={self.uid_base}: must be an unprivileged uid (>= 1000)")
