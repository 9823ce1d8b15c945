"""Sandbox for commands an LLM wrote: namespaces (bubblewrap, else the same layout built with unshare; no
isolation only when asked for by name), limits, timeouts that kill the whole tree, truncated output,
symlink-safe host file access, teardown.

``sandbox`` (Sandbox, RunResult), ``config`` (SandboxConfig), ``isolation`` (the modes, resolve_mode),
``layout`` (the mounts) rendered by ``bwrap`` or ``unshare``, ``limits`` (rlimits, cgroups, killing),
``output`` (truncate_text), ``safefs`` (host-side file access), ``toolchain`` (what a sandbox sees besides /usr);
``harness/`` holds scripts copied into sandboxes, never imported."""
from rollart.sandbox.config import SandboxConfig
from rollart.sandbox.isolation import SandboxUnavailable, resolve_mode
from rollart.sandbox.output import truncate_text
from rollart.sandbox.safefs import UnsafePathError
from rollart.sandbox.sandbox import RunResult, Sandbox

__all__ = ["Sandbox", "SandboxConfig", "SandboxUnavailable", "RunResult", "UnsafePathError", "resolve_mode",
           "truncate_text"]
