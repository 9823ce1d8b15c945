"""Render a sandbox layout as a bubblewrap invocation.

Everything but the command goes through ``--args FD`` (a pipe), not argv: bwrap's own process is
PID 1 inside the sandbox, so its argv is what ``ps`` there shows, and it must name no host path or
environment value. Needs bubblewrap >= 0.8 (``--disable-userns``); ``isolation`` probes for it.
"""
from __future__ import annotations

import os

from rollart.sandbox.layout import Mount


def bwrap_options(layout: list[Mount], *, workdir: str, env: dict[str, str]) -> list[str]:
    """The options (all but the command) for this layout: new namespaces, no nested user namespaces."""
    opts = ["--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
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
    return ["bwrap", "--args", str(read_fd), "--", *command], read_fd
