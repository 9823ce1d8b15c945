"""The actor processes of this process's run, found the way an operator would: by reading /proc, not by asking
the run. Each runs ``python -m rollart.actors.serve --cls module:Class --name NAME --connect ... --parent-pid PID``,
PID being the process that started it (it keeps that argument when it outlives its parent)."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class ActorProcess:
    pid: int
    name: str
    cls: str
    """``module:Class`` of the actor."""
    endpoint: str
    """The coordinator socket the actor connected to (``tcp://host:port``)."""


def _option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else ""


def actor_processes(parent: int | None = None) -> list[ActorProcess]:
    """Live actor processes started by ``parent`` (default: this process), oldest pid first."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue  # exited meanwhile
        if "rollart.actors.serve" not in argv or _option(argv, "--parent-pid") != str(parent):
            continue
        found.append(ActorProcess(pid, _option(argv, "--name"), _option(argv, "--cls"), _option(argv, "--connect")))
    return sorted(found, key=lambda p: p.pid)


def find_actor(class_name: str, parent: int | None = None) -> ActorProcess | None:
    """The first live actor process of class ``class_name`` (e.g. ``TrainerActor``), or None."""
    for proc in actor_processes(parent):
        if proc.cls.rsplit(":", 1)[-1] == class_name:
            return proc
    return None


def kill9(proc: ActorProcess) -> None:
    """``kill -9`` the process (a real SIGKILL: no handler, no cleanup)."""
    os.kill(proc.pid, signal.SIGKILL)
