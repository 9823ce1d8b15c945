"""What a process really sent and received over TCP, as the kernel counts it (for tests and benchmarks).

``tcp_bytes(pid)`` sums ``bytes_acked`` and ``bytes_received`` of every TCP connection the process owns, read
from ``ss -tinp`` (iproute2): the kernel's own per-socket counters, so it sees every ZeroMQ frame, whichever
thread or library sent it. ``/proc/<pid>/io`` would not do: socket send/recv are not counted there.
Counters of a connection closed meanwhile are lost, so measure deltas over connections that stay open.
"""
from __future__ import annotations

import re
import shutil
import subprocess

_FIELD = re.compile(r"\b(bytes_acked|bytes_received):(\d+)")


def available() -> bool:
    return shutil.which("ss") is not None


def tcp_bytes(pid: int) -> tuple[int, int]:
    """(sent, received) bytes over every TCP connection process ``pid`` owns now."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout
    sent = received = 0
    owner = f"pid={pid},"
    current = False
    for line in out.splitlines():
        if not line[:1].isspace():  # a connection line (its details follow, indented)
            current = owner in line
            continue
        if current:
            for key, value in _FIELD.findall(line):
                if key == "bytes_acked":
                    sent += int(value)
                else:
                    received += int(value)
    return sent, received
