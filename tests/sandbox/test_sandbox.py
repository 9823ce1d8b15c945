"""Sandbox basics: modes (bwrap, unshare, rlimit), limits, timeouts, truncation, safe file access, teardown."""
from __future__ import annotations

import os

import pytest

from rollart.sandbox import Sandbox, SandboxConfig, UnsafePathError, resolve_mode
from rollart.sandbox.isolation import SandboxUnavailable, mode_works
from rollart.sandbox.limits import pids_of_uid
from rollart.sandbox.output import BoundedOutput, truncate_text

FAST = dict(timeout_s=20.0, cpu_seconds=2, memory_mb=256, max_processes=32, file_size_mb=4, disk_mb=16,
            output_limit_bytes=2048)


@pytest.fixture
def any_mode() -> str:
    """The strongest mode that works here, or rlimit: these tests check features every mode has."""
    try:
        return resolve_mode("auto")
    except SandboxUnavailable:
        return "rlimit"


def test_bounded_output_keeps_head_and_tail_with_marker():
    out = BoundedOutput(10)
    out.feed(b"0123456789abcdefghij")
    assert out.truncated
    assert out.text().startswith("01234") and out.text().endswith("fghij")
    assert "10 bytes not shown" in out.text()
    small = BoundedOutput(100)
    small.feed(b"hello")
    assert small.text() == "hello" and not small.truncated
    assert truncate_text("x" * 50, 10).count("x") == 10 and "truncated" in truncate_text("x" * 50, 10)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="mode"):
        SandboxConfig(mode="docker")
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxConfig(timeout_s=0)


def test_auto_mode_prefers_bwrap_then_unshare_and_never_rlimit():
    expected = "bwrap" if mode_works("bwrap")[0] else ("unshare" if mode_works("unshare")[0] else None)
    if expected is None:
        with pytest.raises(SandboxUnavailable):
            resolve_mode("auto")
    else:
        assert resolve_mode("auto") == expected


@pytest.mark.parametrize("mode", ["bwrap", "unshare", "rlimit"])
def test_modes_run_commands_and_keep_the_workspace(mode):
    if not mode_works(mode)[0]:
        pytest.skip(f"{mode} unavailable here: {mode_works(mode)[1]}")
    with Sandbox(SandboxConfig(mode=mode, **FAST)) as sb:
        assert sb.mode == mode
        r = sb.run("echo hi > a.txt && python3 -c 'import pytest, sys; print(open(\"a.txt\").read().strip(), pytest.__name__)'")
        assert r.ok and r.output.strip() == "hi pytest", r.observation()
        assert sb.read_file("a.txt", 100)[0] == b"hi\n"
        r = sb.run("sleep 30", timeout_s=1.0)
        assert r.timed_out and "timed out" in r.observation()
        # a background process does not outlive its command
        sb.run("(sleep 60 &) ; nohup sleep 60 >/dev/null 2>&1 & setsid sleep 60 & echo started")
        if sb.uid is not None:
            assert pids_of_uid(sb.uid) == set()


@pytest.mark.parametrize("mode", ["unshare", "rlimit"])
def test_fallback_modes_hide_or_deny_host_secrets(mode):
    if not mode_works(mode)[0]:
        pytest.skip(f"{mode} unavailable here")
    if os.geteuid() != 0:
        pytest.skip("uid drop needs root")
    with Sandbox(SandboxConfig(mode=mode, **FAST)) as sb:
        r = sb.run("cat /etc/shadow; ls /root")
        assert "root:" not in r.output
        r = sb.run("python3 -c 'x = bytearray(4 << 30)'")
        assert "MemoryError" in r.output
        r = sb.run("head -c 64M /dev/zero > big")
        assert not r.ok


def test_network_namespace_in_unshare_mode():
    if not mode_works("unshare")[0]:
        pytest.skip("unshare unavailable")
    with Sandbox(SandboxConfig(mode="unshare", **FAST)) as sb:
        r = sb.run("python3 -c \"import socket; print(sorted(n for _, n in socket.if_nameindex()))\"")
        assert r.output.strip() == "['lo']", r.observation()


def test_long_output_is_truncated_with_marker(any_mode):
    with Sandbox(SandboxConfig(mode=any_mode, **FAST)) as sb:
        r = sb.run("seq 1 20000")
        assert r.ok and r.truncated
        assert "output truncated" in r.output and r.output.startswith("1\n2\n") and r.output.rstrip().endswith("20000")
        assert len(r.output) < 2048 + 200


@pytest.mark.parametrize("mode", ["bwrap", "unshare", "rlimit"])
def test_exit_codes_and_signals_are_reported(mode):
    if not mode_works(mode)[0]:
        pytest.skip(f"{mode} unavailable here: {mode_works(mode)[1]}")
    with Sandbox(SandboxConfig(mode=mode, **FAST)) as sb:
        assert sb.run("exit 3").observation() == "[exit code 3]"
        assert "SIGKILL" in sb.run("kill -9 $$").observation()
        assert "SIGTERM" in sb.run("kill -TERM $$").observation()
        assert "SIGSEGV" in sb.run(["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]).observation()
        r = sb.run("yes")  # endless output is cut off long before the timeout
        assert r.killed_reason.startswith("output exceeded") and not r.timed_out


def test_safe_file_access_refuses_symlinks_and_escapes(any_mode):
    with Sandbox(SandboxConfig(mode=any_mode, **FAST)) as sb:
        sb.run("ln -s /etc/passwd link; mkdir d; ln -s / d/up; mkfifo pipe")
        for bad in ("link", "d/up/etc/passwd", "../x", "/etc/passwd", "pipe"):
            with pytest.raises((UnsafePathError, OSError)):
                sb.read_file(bad, 100)
        with pytest.raises(UnsafePathError):
            sb.write_file("d/up/tmp/x", b"x")
        with pytest.raises(UnsafePathError):
            sb.write_file("link", b"x")
        sb.write_file("/workspace/sub/ok.txt", b"fine")
        assert sb.read_file("sub/ok.txt", 10)[0] == b"fine"
        assert sb.run("cat sub/ok.txt").output.strip() == "fine"


def test_teardown_removes_workspace_and_processes(any_mode):
    sb = Sandbox(SandboxConfig(mode=any_mode, **FAST))
    sb.write_file("x.txt", b"x")
    ws, uid = sb.workspace, sb.uid
    sb.close()
    sb.close()  # idempotent
    assert not ws.exists() and not os.path.ismount(ws)
    if uid is not None:
        assert pids_of_uid(uid) == set()
    with pytest.raises(RuntimeError, match="closed"):
        sb.run("true")


def test_disk_budget_enforced_without_tmpfs(any_mode):
    with Sandbox(SandboxConfig(mode=any_mode, workspace_tmpfs=False, **{**FAST, "disk_mb": 4})) as sb:
        r = sb.run("head -c 3M /dev/zero > a; head -c 3M /dev/zero > b")
        assert not r.ok and "over the 4 MB limit" in r.observation()
        assert sb.run("rm a b && echo ok").ok


def test_python_home_is_bound_and_first_on_path(any_mode):
    with pytest.raises(ValueError, match="python_home"):
        SandboxConfig(python_home="/nonexistent")
    with Sandbox(SandboxConfig(mode=any_mode, python_home="/usr", **FAST)) as sb:
        r = sb.run("command -v python3")
        expected = "/usr/bin/python3" if sb.mode == "rlimit" else "/opt/python/bin/python3"
        assert r.ok and r.output.strip() == expected


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])
def test_mounts_cannot_be_undone_nor_namespaces_nested(mode):
    if not mode_works(mode)[0]:
        pytest.skip(f"{mode} unavailable here: {mode_works(mode)[1]}")
    with Sandbox(SandboxConfig(mode=mode, **FAST)) as sb:
        r = sb.run("umount -l /workspace; umount -l /usr; unshare -r true && echo NESTED; ls /usr/bin/python3")
        assert "NESTED" not in r.output and "/usr/bin/python3" in r.output
        assert sb.run("echo x > /workspace/x && cat x").output.strip() == "x"
