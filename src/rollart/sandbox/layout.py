"""The filesystem a namespaced command sees, as a list of mounts both isolation modes build alike.

Only what is listed exists inside: the read-only toolchain (/usr, /lib* links, a few /etc files, the
Python packages tests need), the workspace, a fresh /proc of the sandbox's own PID namespace, a
minimal /dev, and private size-limited tmpfs on /tmp and /dev/shm. No /sys, no host /etc, no /root,
no project; /proc/self/mountinfo lists only these mounts. ``bwrap`` and ``unshare`` render the same
list, so one security suite checks both.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

WORKSPACE = "/workspace"
SITE = "/opt/rollart/site"
HARNESS = "/opt/rollart/harness"
PYTHON_HOME = "/opt/python"
# /etc entries the toolchain needs; nothing else of the host's /etc is visible.
ETC_RO = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
          "/etc/localtime", "/etc/mime.types")
# The device nodes a command may use (bound from the host: a user namespace cannot mknod).
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}


@dataclass(frozen=True)
class Mount:
    """One entry of the sandbox's filesystem.

    kind: "ro-bind" / "bind" (``src`` = host path), "symlink" (``src`` = link target), "tmpfs"
    (``size`` bytes), "proc" (the sandbox's PID namespace), "dev" (DEVICES and DEV_LINKS only)."""

    kind: str
    dest: str
    src: str = ""
    size: int = 0


def lib_links() -> list[Mount]:
    """/bin, /lib, /lib64, /sbin ... as the host has them (symlinks into /usr, or read-only binds)."""
    out = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{name}"
        if os.path.islink(host):
            out.append(Mount("symlink", host, os.readlink(host)))
        elif os.path.isdir(host):
            out.append(Mount("ro-bind", host, host))
    return out


def base_layout(tmp_bytes: int) -> list[Mount]:
    """The toolchain and the private kernel filesystems: enough to run ``true`` (the probes use it)."""
    return [Mount("ro-bind", "/usr", "/usr"), *lib_links(), Mount("proc", "/proc"), Mount("dev", "/dev"),
            Mount("tmpfs", "/dev/shm", size=tmp_bytes), Mount("tmpfs", "/tmp", size=tmp_bytes)]


def sandbox_layout(*, workspace: str, site: str, harness: str, etc_dir: str, tmp_bytes: int,
                   extra_ro_binds: dict) -> list[Mount]:
    """Everything one sandbox sees; ``etc_dir`` holds its own passwd/group/hosts."""
    mounts = base_layout(tmp_bytes)
    mounts += [Mount("ro-bind", path, path) for path in ETC_RO if os.path.exists(path)]
    mounts += [Mount("ro-bind", f"/etc/{name}", os.path.join(etc_dir, name)) for name in sorted(os.listdir(etc_dir))]
    mounts += [Mount("ro-bind", SITE, site), Mount("ro-bind", HARNESS, harness)]
    mounts += [Mount("ro-bind", str(dest), str(src)) for src, dest in extra_ro_binds.items()]
    mounts.append(Mount("bind", WORKSPACE, workspace))
    return mounts
