"""Isolation modes: how a command line is wrapped so it runs in namespaces (or, last, plain rlimits).

``bwrap``   bubblewrap: new user/mount/pid/net/ipc/uts/cgroup namespaces, a root made of the read-only
            toolchain (/usr, /lib*, a few /etc files, the Python packages tests need) plus the
            workspace; no network, no /root, no /work, no /etc/shadow.
``unshare`` util-linux unshare: the same namespaces, but the host root stays mounted, with tmpfs laid
            over the secret places (/root, /home, /work, ...) inside a nested user namespace so the
            command cannot lift them.
``rlimit``  a plain child: rlimits, a dropped uid, a cgroup, its own process group. No network or
            filesystem isolation beyond file permissions; logged loudly.
"""
from __future__ import annotations

import functools
import logging
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Host paths laid over with an empty tmpfs (or /dev/null for files) in "unshare" mode.
HIDDEN_DIRS = ("/root", "/home", "/work", "/srv", "/mnt", "/media", "/opt", "/var", "/run", "/boot")
HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers")
# /etc entries the toolchain needs; nothing else of /etc is visible in "bwrap" mode.
ETC_RO = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
          "/etc/localtime", "/etc/mime.types")


@dataclass
class Paths:
    """Where the sandboxed command sees its workspace, the Python packages and the harness."""

    workspace: str
    site: str
    harness: str


@functools.lru_cache(maxsize=None)
def mode_works(mode: str) -> tuple[bool, str]:
    """Probe once per process whether ``mode`` can start a trivial command here."""
    if mode == "rlimit":
        return True, ""
    tool = shutil.which(mode)
    if tool is None:
        return False, f"{mode} not installed (apt-get install -y {'bubblewrap' if mode == 'bwrap' else 'util-linux'})"
    if mode == "bwrap":
        argv = [tool, "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/usr", "/usr",
                *_lib_links(), "--proc", "/proc", "--dev", "/dev", "true"]
    else:
        argv = [tool, "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "true"]
    try:
        r = subprocess.run(argv, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"{mode} probe failed: {e}"
    if r.returncode != 0:
        return False, f"{mode} probe exited {r.returncode}: {r.stderr.decode(errors='replace').strip()[:200]}"
    return True, ""


def resolve_mode(requested: str) -> str:
    """The mode to use: the requested one (error if it does not work) or the strongest working one."""
    if requested != "auto":
        ok, why = mode_works(requested)
        if not ok:
            raise RuntimeError(f"sandbox mode={requested!r} unavailable: {why}; use mode=auto to fall back")
        return requested
    reasons = []
    for mode in ("bwrap", "unshare", "rlimit"):
        ok, why = mode_works(mode)
        if ok:
            if reasons:
                log.warning("sandbox: falling back to mode=%s (%s)", mode, "; ".join(reasons))
            return mode
        reasons.append(why)
    raise AssertionError("rlimit mode always works")


def _lib_links() -> list[str]:
    """Re-create /bin, /lib, /lib64, /sbin ... as the host has them (symlinks into /usr, or ro binds)."""
    out: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{name}"
        if os.path.islink(host):
            out += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            out += ["--ro-bind", host, host]
    return out


def bwrap_argv(*, workspace: str, site: str, harness: str, etc_dir: str, tmp_bytes: int,
               extra_ro_binds: dict, env: dict[str, str], command: list[str]) -> list[str]:
    """The bubblewrap command line; only what is listed here exists inside the sandbox."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--hostname", "sandbox", "--ro-bind", "/usr", "/usr", *_lib_links()]
    for path in ETC_RO:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for name in sorted(os.listdir(etc_dir)):
        argv += ["--ro-bind", os.path.join(etc_dir, name), f"/etc/{name}"]
    argv += ["--ro-bind", site, "/opt/rollart/site", "--ro-bind", harness, "/opt/rollart/harness"]
    for host, dest in extra_ro_binds.items():
        argv += ["--ro-bind", str(host), str(dest)]
    argv += ["--bind", workspace, "/workspace", "--chdir", "/workspace", "--proc", "/proc", "--dev", "/dev",
             "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--remount-ro", "/", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv + ["--", *command]


def unshare_argv(*, workspace: str, toolchain: str, tmp_bytes: int, command: list[str]) -> list[str]:
    """Namespaces via unshare; a private size-limited /tmp (the workspace and toolchain, which live
    under /tmp, are carried over through staging mounts); secrets hidden under tmpfs in an outer user
    namespace, the command run in a nested one so those mounts are locked and cannot be lifted."""
    q = shlex.quote
    steps: list[str] = []
    if os.path.isdir("/run") and os.path.isdir("/mnt"):
        steps += [f"mount -n --bind {q(workspace)} /run", f"mount -n --bind {q(toolchain)} /mnt",
                  f"mount -n -t tmpfs -o size={tmp_bytes},mode=1777 none /tmp",
                  f"mkdir -p {q(workspace)} {q(toolchain)}",
                  f"mount -n --move /run {q(workspace)}", f"mount -n --move /mnt {q(toolchain)}",
                  f"cd {q(workspace)}"]
    steps += [f"mount -t tmpfs -o size=1m,mode=0755 none {d} 2>/dev/null" for d in HIDDEN_DIRS if os.path.isdir(d)]
    steps += [f"mount --bind /dev/null {f} 2>/dev/null" for f in HIDDEN_FILES if os.path.exists(f)]
    staging, hiding = steps[:7], steps[7:]
    prologue = ("{ " + " && ".join(staging) + "; } || { echo 'sandbox: private /tmp setup failed' >&2; exit 125; }; "
                if staging else "")
    prologue += "; ".join(hiding + ['exec unshare --user --mount --map-user=1000 --map-group=1000 -- "$@"'])
    return ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--ipc", "--uts",
            "--fork", "--kill-child", "--mount-proc", "--", "/bin/sh", "-c", prologue, "sh", *command]
