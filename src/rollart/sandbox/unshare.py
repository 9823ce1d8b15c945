"""Render a sandbox layout as util-linux ``unshare`` plus a setup script: bubblewrap's work in shell.

Outer ``unshare`` makes new user (root mapped to the caller), mount, net, pid, ipc, uts and cgroup
namespaces. A shell, PID 1 there, builds the layout on a fresh tmpfs, ``pivot_root``s into it and
detaches the host's root, so nothing of the host is left reachable (no /sys, no host /etc, no host
mount table). It then caps user namespaces below it at one and runs the command (as a child, so a
command killing itself is reported, not ignored as a signal to PID 1 would be) in a nested user
namespace as uid 1000, where it holds no capability over the mounts or the namespaces.

The script travels in an environment variable that is unset before the command starts: PID 1's
argv is world-readable inside, and must name no host path.
"""
from __future__ import annotations

import os
import shlex
import shutil

from rollart.sandbox.layout import DEV_LINKS, DEVICES, Mount

SCRIPT_VAR = "ROLLART_SANDBOX_SETUP"
SETUP_FAILED = 125
_LOCKED_FLAGS = ((os.ST_NOEXEC, "noexec"), (os.ST_NOATIME, "noatime"), (os.ST_NODIRATIME, "nodiratime"))


def _ro_remount(path: str, src: str) -> str:
    """Remount read-only, repeating the source's noexec/atime flags: a user namespace cannot clear them."""
    try:
        flags = os.statvfs(src).f_flag
    except OSError:
        flags = 0
    extra = "".join(f",{name}" for bit, name in _LOCKED_FLAGS if flags & bit)
    return f"mount -n -o remount,bind,ro,nosuid,nodev{extra} {path}"


def setup_script(layout: list[Mount], *, newroot: str, workdir: str) -> str:
    """The shell script PID 1 runs: build ``layout`` on a tmpfs at ``newroot``, enter it, run "$@"."""
    q = shlex.quote
    at = lambda dest: q(newroot + dest)  # noqa: E731
    steps = [f"mount -n -t tmpfs -o size=1m,mode=0755,nosuid,nodev none {q(newroot)}"]
    read_only = []
    for m in layout:
        parent = at(os.path.dirname(m.dest))
        if m.kind in ("ro-bind", "bind"):
            if os.path.isdir(m.src):
                steps += [f"mkdir -p {at(m.dest)}", f"mount -n --rbind {q(m.src)} {at(m.dest)}"]
            else:
                steps += [f"mkdir -p {parent}", f"touch {at(m.dest)}", f"mount -n --bind {q(m.src)} {at(m.dest)}"]
            if m.kind == "ro-bind":
                read_only.append(_ro_remount(at(m.dest), m.src))
        elif m.kind == "symlink":
            steps += [f"mkdir -p {parent}", f"ln -s {q(m.src)} {at(m.dest)}"]
        elif m.kind == "tmpfs":
            steps += [f"mkdir -p {at(m.dest)}",
                      f"mount -n -t tmpfs -o size={m.size},mode=1777,nosuid,nodev none {at(m.dest)}"]
        elif m.kind == "proc":
            steps += [f"mkdir -p {at(m.dest)}", f"mount -n -t proc -o nosuid,nodev,noexec proc {at(m.dest)}"]
        elif m.kind == "dev":
            dev = at(m.dest)
            steps += [f"mkdir -p {dev}", f"mount -n -t tmpfs -o size=64k,mode=0755,nosuid,noexec none {dev}",
                      f"mkdir {dev}/pts {dev}/shm"]
            for name in DEVICES:
                steps += [f"touch {dev}/{name}", f"mount -n --bind /dev/{name} {dev}/{name}"]
            steps += [f"ln -s {q(target)} {dev}/{name}" for name, target in DEV_LINKS.items()]
            read_only.append(f"mount -n -o remount,bind,ro,nosuid,noexec {dev}")
        else:
            raise ValueError(f"unknown mount kind {m.kind!r}")
    steps += read_only
    ip = shutil.which("ip")
    if ip:  # loopback up, as bwrap does (tests may talk to a local server); only this namespace's
        steps.append(f"{q(ip)} link set lo up")
    # The nested namespace of the command counts against this one's limit: no further ones.
    steps.append("echo 1 > /proc/sys/user/max_user_namespaces")
    steps += [f"cd {q(newroot)}", "mkdir .old", "pivot_root . .old", "cd /", "umount -n -l /.old", "rmdir /.old",
              "mount -n -o remount,bind,ro,nosuid,nodev /", f"cd {q(workdir)}"]
    # the tools (pivot_root, ip) live in sbin, which the command's PATH lacks
    return ("command_path=$PATH; PATH=/usr/sbin:/usr/bin:/sbin:/bin\n{ " + " &&\n".join(steps) + "; } || { echo 'sandbox: building the sandbox filesystem failed' >&2; "
            f"exit {SETUP_FAILED}; }}\nPATH=$command_path\nunset {SCRIPT_VAR} command_path\n"
            "unshare --user --map-user=1000 --map-group=1000 -- \"$@\"\nexit $?\n")


def unshare_argv(layout: list[Mount], *, newroot: str, workdir: str,
                 command: list[str]) -> tuple[list[str], dict[str, str]]:
    """(argv, env to add): run argv with the env; ``newroot`` is an empty host directory to mount over."""
    script = setup_script(layout, newroot=newroot, workdir=workdir)
    argv = ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--ipc", "--uts", "--cgroup",
            "--fork", "--kill-child", "--", "/bin/sh", "-c", f'eval "${SCRIPT_VAR}"', "sh", *command]
    return argv, {SCRIPT_VAR: script}
