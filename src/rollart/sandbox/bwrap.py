"""Render a sandbox layout as a bubblewrap invocation.

Everything but the command goes through ``--args FD`` (a pipe), not argv, so that no host path or
environment value shows on a command line ``ps`` could read. PID 1 inside is a shell running the
command as its child (``--as-pid-1``), as in the unshare mode: bwrap's own init would hand its exit
status out and exit before being reaped, leaving a zombie under a host PID 1 that may never reap;
a shell reaps orphans while it waits, reports a command killed by a signal as 128 + signal, and is
reaped by the bwrap that started it. Needs bubblewrap >= 0.8 (``--disable-userns``), which
``isolation`` probes for.
"""
from __future__ import annotations

import os

from rollart.sandbox.layout import Mount

INIT = ["/bin/sh", "-c", '"$@"\nexit $?', "sh"]  # not the last command, so the shell forks it, not execs


def bwrap_options(layout: list[Mount], *, workdir: str, env: dict[str, str]) -> list[str]:
    """The options (all but the command) for this layout: new namespaces, no nested user namespaces."""
    opts = ["--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1", "--die-with-parent", "--new-session",
            "--hostname", "sandbox"]
    for m in layout:
        if m.kind in ("ro-bind", "bind", "symlink"):
            opts += [f"--{m.kind}", m.src, m.dest]
        elif m.kind == "tmpfs":
            opts += ["--size", str(m.size), "--tmpfs", m.dest]
        elif m.kind in ("proc", "dev"):
            opts += [f"--{m.kind}", m.dest]
        else:
            raise ValueError(f"unknown mount kind {m.kind!r}")
    opts += ["--remount-ro", "/", "--chdir", workdir, "--clearenv"]
    for key, value in env.items():
        opts += ["--setenv", key, value]
    return opts


def bwrap_argv(layout: list[Mount], *, workdir: str, env: dict[str, str],
               command: list[str]) -> tuple[list[str], int]:
    """(argv, fd): run argv with ``pass_fds=(fd,)`` and close ``fd`` afterwards. The options wait in a
    pipe (a few KB, far below a pipe's buffer, so writing them here cannot block)."""
    blob = b"".join(opt.encode() + b"\0" for opt in bwrap_options(layout, workdir=workdir, env=env))
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, blob)
    finally:
        os.close(write_fd)
    return ["bwrap", "--args", str(read_fd), "--", *INIT, *command], read_fd
