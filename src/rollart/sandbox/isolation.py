"""Isolation modes: how a command line is wrapped so it runs in namespaces (or, last, plain rlimits).

``bwrap``   bubblewrap: new user/mount/pid/net/ipc/uts/cgroup namespaces, a root made of the read-only
            toolchain (/usr, /lib*, a few /etc files, the Python packages tests need) plus the
            workspace; no network, no /root, no /work, no /etc/shadow.
``unshare`` util-linux unshare: the same namespaces, but the host root stays mounted, with tmpfs laid
            over every top-level directory but the toolchain's (/usr, /lib*, /etc, ...) inside an
            outer user namespace, the command run in a nested one so it cannot lift them.
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

# The top-level host entries an "unshare" sandbox sees (/tmp becomes a private tmpfs); every other one
# is laid over with an empty tmpfs (or /dev/null for files), as are the secret files of /etc.
VISIBLE_TOP = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/sys",
               "/tmp")
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


def _top(path: str) -> str:
    return "/" + os.path.abspath(path).lstrip("/").split("/", 1)[0]


def hidden_top_level() -> tuple[list[str], list[str]]:
    """Every top-level directory and file of the host root except the toolchain's (``VISIBLE_TOP``):
    the sandbox cannot know where projects, checkouts or secrets live, so it shows only what it needs."""
    dirs, files = [], []
    for name in sorted(os.listdir("/")):
        path = "/" + name
        if path in VISIBLE_TOP or os.path.islink(path):
            continue  # top-level symlinks point into /usr or into a directory hidden here
        if os.path.isdir(path):
            dirs.append(path)
        elif os.path.isfile(path):
            files.append(path)
    return dirs, files


def unshare_argv(*, carry: list[tuple[str, str, bool]], workdir: str, tmp_bytes: int,
                 command: list[str]) -> list[str]:
    """Namespaces via unshare; the host root stays mounted, but every top-level entry outside
    ``VISIBLE_TOP`` is laid over with an empty read-only tmpfs (or /dev/null) and /tmp is a private size-limited
    tmpfs. ``carry`` lists (host path, path inside, writable) for what must stay visible under those
    overlays (the workspace, the toolchain, ...): each is bound onto a staging tmpfs at /mnt first and
    moved into place afterwards. The overlays are made in an outer user namespace and the command runs
    in a nested one, so it cannot lift them."""
    q = shlex.quote
    dirs, files = hidden_top_level()
    host_owned = [_top(dest) in VISIBLE_TOP and _top(dest) != "/tmp" for _, dest, _ in carry]
    for (src, dest, _), owned in zip(carry, host_owned):
        if owned and os.path.realpath(src) != os.path.realpath(dest):
            raise ValueError(f"sandbox mode='unshare' cannot bind {src} at {dest}: {_top(dest)} is the host's own; "
                             "pick a destination outside /usr, /etc, /lib*, ... or use mode='bwrap'")
    carry = [c for c, owned in zip(carry, host_owned) if not owned]  # already visible where it is
    if carry and not dirs:
        raise RuntimeError("sandbox mode='unshare' needs a top-level directory such as /mnt to stage mounts in")
    stage = "/mnt" if "/mnt" in dirs else dirs[0] if dirs else ""
    overlaid = [d for d in dirs if d != stage or not carry]  # the staging dir is covered last
    hide = "mount -n -t tmpfs -o size=1m,mode=0755 none "
    setup: list[str] = []
    if carry:
        setup.append(hide + stage)
        for i, (src, _, rw) in enumerate(carry):
            setup += [f"mkdir {stage}/{i}", f"mount -n --bind {q(src)} {stage}/{i}"]
            if not rw:
                setup.append(f"mount -n -o remount,ro,bind {stage}/{i}")
    setup.append(f"mount -n -t tmpfs -o size={tmp_bytes},mode=1777 none /tmp")
    setup += [hide + d for d in overlaid]
    setup += [f"mount -n --bind /dev/null {f}" for f in files + [f for f in HIDDEN_FILES if os.path.exists(f)]]
    for i, (_, dest, _) in enumerate(carry):
        setup += [f"mkdir -p {q(dest)}", f"mount -n --move {stage}/{i} {q(dest)}"]
    setup += [f"mount -n -o remount,bind,ro {d}" for d in overlaid]
    if carry:
        setup.append(hide.replace("-o ", "-o ro,") + stage)  # over the (now empty) staging tmpfs
    setup.append(f"cd {q(workdir)}")
    prologue = ("{ " + " && ".join(setup) + "; } || { echo 'sandbox: hiding the host filesystem failed' >&2; "
                "exit 125; }; exec unshare --user --mount --map-user=1000 --map-group=1000 -- \"$@\"")
    return ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--ipc", "--uts",
            "--fork", "--kill-child", "--mount-proc", "--", "/bin/sh", "-c", prologue, "sh", *command]
