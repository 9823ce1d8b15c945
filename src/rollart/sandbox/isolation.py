"""Isolation modes, and which one a sandbox gets. Commands come from a model: treat them as hostile.

``bwrap``   bubblewrap >= 0.8: new user/mount/pid/net/ipc/uts/cgroup namespaces, no nested user
            namespaces, only the ``layout`` visible.
``unshare`` util-linux unshare: the same namespaces and the same ``layout``, built by a shell script.
``rlimit``  a plain child: rlimits, a dropped uid, a cgroup, its own process group; no filesystem or
            network isolation. Only when asked for by name, and it says so on every run.

``auto`` takes bwrap, else unshare, each only after a probe that runs a real sandboxed ``true`` here
(as an unprivileged uid when we are root, as sandboxes run), and otherwise refuses: it never drops
to ``rlimit`` by itself.
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from rollart.config import one_line_error
from rollart.sandbox import layout
from rollart.sandbox.bwrap import bwrap_argv
from rollart.sandbox.unshare import unshare_argv

log = logging.getLogger(__name__)
PROBE_UID = 65534  # "nobody": probes drop to it when we are root, as every sandbox drops to its own uid
HOW_TO_ISOLATE = ("install bubblewrap >= 0.8 (apt-get install -y bubblewrap), or run where unprivileged user "
                  "namespaces are allowed, or set sandbox.mode=rlimit to accept no filesystem or network isolation")
RLIMIT_WARNING = ("sandbox.mode=rlimit: no filesystem or network isolation; commands run with rlimits and a dropped "
                  "uid only, and can read host files, reach the host's network and write where that uid may")


@one_line_error
class SandboxUnavailable(RuntimeError):
    """No isolation mode that was asked for works on this machine; the message says what would."""


@dataclass
class Paths:
    """Where the sandboxed command sees its workspace, the Python packages and the harness."""

    workspace: str
    site: str
    harness: str


def tool(mode: str) -> str:
    """The absolute path of ``mode``'s program (commands run with the sandbox's PATH, not ours)."""
    return shutil.which(mode) or mode


def _probe(mode: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="rollart-probe-") as tmp:
        os.chmod(tmp, 0o755)  # the probe's uid must reach its mount point
        pass_fds: tuple[int, ...] = ()
        env = {"PATH": "/usr/bin:/bin"}
        if mode == "bwrap":
            argv, fd = bwrap_argv(layout.base_layout(1 << 20), workdir="/", env=env, command=["true"])
            pass_fds = (fd,)
        else:
            argv, extra = unshare_argv(layout.base_layout(1 << 20), newroot=tmp, workdir="/", command=["true"])
            env.update(extra)
        argv[0] = tool(mode)
        drop = (lambda: (os.setgroups([]), os.setgid(PROBE_UID), os.setuid(PROBE_UID))) if os.geteuid() == 0 else None
        try:
            return subprocess.run(argv, env=env, capture_output=True, timeout=20, pass_fds=pass_fds,
                                  preexec_fn=drop)
        finally:
            for fd in pass_fds:
                os.close(fd)


@functools.lru_cache(maxsize=None)
def mode_works(mode: str) -> tuple[bool, str]:
    """Probe once per process whether ``mode`` can run a sandboxed command here; (ok, why not)."""
    if mode == "rlimit":
        return True, ""
    if shutil.which(mode) is None:
        return False, f"{mode} is not installed"
    try:
        r = _probe(mode)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"{mode} probe failed: {e}"
    if r.returncode == 0:
        return True, ""
    why = r.stderr.decode(errors="replace").strip().replace("\n", " ")[:200]
    if mode == "bwrap":
        version = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
        return False, f"{version or 'bwrap'} cannot run the sandbox (needs bubblewrap >= 0.8): {why}"
    return False, f"unshare cannot build the sandbox (user namespaces not allowed?): {why}"


@functools.lru_cache(maxsize=None)
def _strongest() -> str:
    reasons = []
    for mode in ("bwrap", "unshare"):
        ok, why = mode_works(mode)
        if ok:
            if reasons:
                log.info("sandbox: using mode=%s (%s)", mode, "; ".join(reasons))
            return mode
        reasons.append(why)
    raise SandboxUnavailable(f"sandbox.mode=auto: no isolation works here ({'; '.join(reasons)}): {HOW_TO_ISOLATE}")


def resolve_mode(requested: str) -> str:
    """The mode to use: the requested one (an error if it does not work) or, for auto, the strongest."""
    if requested == "auto":
        return _strongest()
    ok, why = mode_works(requested)
    if not ok:
        raise SandboxUnavailable(f"sandbox.mode={requested} is unavailable here: {why}; {HOW_TO_ISOLATE}")
    return requested
