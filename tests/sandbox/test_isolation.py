"""Isolation modes: auto picks bwrap or unshare after probing them and otherwise refuses; rlimit is opt-in and
warns; both namespace modes show the same minimal filesystem; no zombies are left behind."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from rollart.sandbox import Sandbox, SandboxConfig, isolation, resolve_mode
from rollart.sandbox import sandbox as sandbox_module
from rollart.sandbox.isolation import SandboxUnavailable, mode_works

FAST = dict(timeout_s=20.0, cpu_seconds=2, memory_mb=256, max_processes=32, file_size_mb=4, disk_mb=16, tmp_mb=4)


@pytest.fixture
def fresh_probes():
    """Forget the probes' cached answers before and after (a test changes what is installed)."""
    mode_works.cache_clear()
    isolation._strongest.cache_clear()
    yield
    mode_works.cache_clear()
    isolation._strongest.cache_clear()


def need(mode: str) -> None:
    ok, why = mode_works(mode)
    if not ok:
        pytest.skip(f"mode={mode} unavailable here: {why}")


def test_auto_refuses_in_one_line_naming_the_ways_to_isolate(monkeypatch, fresh_probes):
    monkeypatch.setenv("PATH", "/nonexistent")  # neither bwrap nor unshare can be found
    with pytest.raises(SandboxUnavailable) as e:
        resolve_mode("auto")
    msg = str(e.value)
    assert "\n" not in msg and "bubblewrap" in msg and "user namespaces" in msg and "sandbox.mode=rlimit" in msg
    with pytest.raises(SandboxUnavailable, match="sandbox.mode=unshare is unavailable"):
        resolve_mode("unshare")
    assert resolve_mode("rlimit") == "rlimit"  # only when asked for by name


def test_old_bwrap_is_skipped_with_a_reason(monkeypatch, fresh_probes):
    bindir = Path(tempfile.mkdtemp(prefix="rollart-fake-bwrap-"))  # reachable by the probe's dropped uid
    bindir.chmod(0o755)
    fake = bindir / "bwrap"  # a bubblewrap 0.6 answers the probe like this
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'bubblewrap 0.6.1'; exit 0; }\n"
                    "echo 'bwrap: Unknown option --disable-userns' >&2; exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    ok, why = mode_works("bwrap")
    shutil.rmtree(bindir)
    assert not ok and "0.6.1" in why and ">= 0.8" in why and "--disable-userns" in why
    if mode_works("unshare")[0]:
        assert resolve_mode("auto") == "unshare"


def test_rlimit_mode_warns_at_run_start(monkeypatch, caplog):
    monkeypatch.setattr(sandbox_module, "_logged_modes", set())
    with caplog.at_level(logging.WARNING, logger="rollart.sandbox"):
        Sandbox(SandboxConfig(mode="rlimit", **FAST)).close()
    assert any("sandbox.mode=rlimit" in r.getMessage() and "no" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])
def test_namespace_modes_show_the_same_minimal_filesystem(mode):
    need(mode)
    with Sandbox(SandboxConfig(mode=mode, **FAST)) as sb:
        libs = {n for n in ("bin", "sbin", "lib", "lib32", "lib64", "libx32") if os.path.exists("/" + n)}
        assert set(sb.run("ls /").output.split()) == {"dev", "etc", "opt", "proc", "tmp", "usr", "workspace"} | libs
        etc = set(sb.run("ls /etc").output.split())
        assert {"passwd", "group", "hosts", "ld.so.cache"} <= etc and not etc & {"shadow", "hostname", "resolv.conf"}
        dev = set(sb.run("ls /dev").output.split())
        assert {"null", "zero", "urandom", "shm"} <= dev and not dev & {"vda", "sda", "kmsg", "mem", "kvm"}
        assert not sb.run("ls /sys/class/net").ok
        mounts = sb.run("cut -d' ' -f5 /proc/self/mountinfo").output.split()
        assert "/workspace" in mounts and not [m for m in mounts if m.startswith(("/sys", "/root", "/home", "/mnt"))]
        assert "rollart-sandbox" not in sb.run("cat /proc/self/mountinfo | cut -d' ' -f5-").output.split(" - ")[0]


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])
def test_dev_shm_is_private_bounded_and_gone_after_the_command(mode):
    need(mode)
    marker = f"rollart-shm-{os.getpid()}"
    with Sandbox(SandboxConfig(mode=mode, **FAST)) as a, Sandbox(SandboxConfig(mode=mode, **FAST)) as b:
        assert a.run(f"echo hi > /dev/shm/{marker} && cat /dev/shm/{marker}").output.strip() == "hi"
        assert not a.run("head -c 16M /dev/zero > /dev/shm/big").ok  # tmp_mb=4
        assert not os.path.exists(f"/dev/shm/{marker}")
        assert not b.run(f"cat /dev/shm/{marker}").ok
        assert not a.run(f"cat /dev/shm/{marker}").ok  # a fresh one per command, like /tmp


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])  # rlimit has no PID namespace to hold orphans
def test_no_zombies_where_pid_1_does_not_reap(mode):
    """A child subreaper that never reaps stands in for a container's PID 1: every process a sandbox
    started must be reaped by someone else than it."""
    need(mode)
    script = textwrap.dedent(f"""
        import ctypes, os, sys
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        from rollart.sandbox import Sandbox, SandboxConfig
        with Sandbox(SandboxConfig(mode={mode!r}, timeout_s=1.0, memory_mb=256, disk_mb=16)) as sb:
            for cmd in ("true", "sleep 5", "(sleep 60 &); setsid sleep 60 & echo x", "yes", "kill -9 $$"):
                sb.run(cmd)
        zombies = []
        for pid in os.listdir("/proc"):
            try:
                stat = open(f"/proc/{{pid}}/stat").read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                zombies.append(stat.split(")")[0])
        print("ZOMBIES", zombies)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "ZOMBIES []" in r.stdout, r.stdout + r.stderr
