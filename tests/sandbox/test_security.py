"""Security suite, in every isolation mode this machine runs: hostile commands are contained; the host and
other episodes are unaffected. A mode the machine cannot run is skipped with the probe's reason."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from rollart.sandbox import Sandbox, SandboxConfig, SandboxUnavailable
from rollart.sandbox.isolation import mode_works
from rollart.sandbox.limits import pids_of_uid

PROJECT_FILE = Path(__file__).resolve().parents[2] / "setup.cfg"
HOST_SECRET_ENV = "ROLLART_TEST_HOST_SECRET"
SECRET = "s3cr3t-" + os.urandom(6).hex()

# Small limits keep the suite fast; each hostile command is bounded by them.
CFG = SandboxConfig(timeout_s=3.0, cpu_seconds=2, memory_mb=256, max_processes=32, file_size_mb=4,
                    disk_mb=16, tmp_mb=4, output_limit_bytes=4096)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Host-side canaries: a secret file, a TCP and a UDP server on loopback, another live episode."""
    canary_dir = tmp_path_factory.mktemp("canary")
    canary = canary_dir / "canary.txt"
    canary.write_text(SECRET)
    os.chmod(canary_dir, 0o755)
    os.chmod(canary, 0o644)  # world-readable on purpose: only isolation can hide it
    os.environ[HOST_SECRET_ENV] = SECRET
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.05)
    accepted: list = []

    def accept_loop():
        tcp.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = tcp.accept()
                accepted.append(conn)
            except OSError:
                pass

    stop = threading.Event()
    t = threading.Thread(target=accept_loop, daemon=True)
    t.start()
    try:
        other = Sandbox(CFG, name="other-episode")
    except SandboxUnavailable as e:
        pytest.skip(f"no isolation mode works here: {e}")
    other.write_file("secret.txt", SECRET.encode())
    state = dict(canary=canary, tcp_port=tcp.getsockname()[1], udp=udp, udp_port=udp.getsockname()[1],
                 accepted=accepted, other=other, project_digest=_digest(PROJECT_FILE))
    yield state
    stop.set()
    t.join()
    tcp.close()
    udp.close()
    other.close()
    os.environ.pop(HOST_SECRET_ENV, None)


def _cases(h) -> dict[str, str]:
    me = os.getpid()
    other_ws = h["other"].workspace
    return {
        # network
        "tcp_to_host_loopback": f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {h['tcp_port']}), timeout=1)\"",
        "bash_dev_tcp": f"exec 3<>/dev/tcp/127.0.0.1/{h['tcp_port']} && echo connected",
        "udp_to_host_loopback": ("python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                                 f"s.sendto(b'{SECRET}', ('127.0.0.1', {h['udp_port']})); s.settimeout(1); s.recv(10)\""),
        "dns_lookup": "python3 -c \"import socket; socket.getaddrinfo('pypi.org', 443)\"",
        # writes / deletes outside the workspace
        "delete_toolchain": "rm -f /usr/bin/python3",
        "write_host_canary": f"echo pwned > {h['canary']}",
        "append_etc_passwd": "echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd",
        "rm_rf_root": "rm -rf --no-preserve-root / 2>/dev/null; test -e /usr/bin/python3 && exit 1",
        "write_project_file": f"echo pwned >> {PROJECT_FILE}",
        "create_dir_in_root": "mkdir /escape",
        "write_toolchain_site": "echo 'raise SystemExit' >> /opt/rollart/site/pytest/__init__.py",
        # host secrets
        "read_shadow": "cat /etc/shadow",
        "read_root_home": "ls -a /root && cat /root/.bashrc",
        "read_project_file": f"cat {PROJECT_FILE}",
        "read_host_canary": f"cat {h['canary']}",
        "grep_host_env": f"cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep {HOST_SECRET_ENV}",
        "read_other_episode": f"cat {other_ws}/secret.txt",
        "read_host_etc": "cat /etc/hostname /etc/resolv.conf /etc/os-release",
        "list_host_net_interfaces": "ls /sys/class/net",
        "read_host_mount_table": "grep -e ' /sys ' -e ' /root' /proc/self/mountinfo",
        # the brackets keep the pattern from matching this command's own argv
        "host_paths_on_command_lines": ("cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | "
                                        "grep -e 'rollart-sandbo[x]' -e 'PYTHONDONTWRITEBYTECOD[E]' -e '/tm[p]/'"),
        # resource bombs
        "fork_bomb": ":(){ :|:& };: ; sleep 30",
        "python_fork_bomb": "python3 -c \"import os\nwhile True:\n    os.fork()\"",
        "memory_bomb_one_shot": "python3 -c 'x = bytearray(8 << 30)'",
        "memory_bomb_growing": "python3 -c \"x = []\nwhile True: x.append(bytearray(1 << 20))\"",
        "memory_bomb_many_processes": ("pids=(); for i in 1 2 3 4 5 6; do python3 -c 'import time; x = bytearray(150 << 20); "
                                       "x[::4096] = bytes(len(x[::4096])); time.sleep(2)' & pids+=($!); done; "
                                       "for p in ${pids[@]}; do wait $p || exit 1; done"),
        "fill_tmp": "head -c 64M /dev/zero > /tmp/big",
        "fill_dev_shm": "head -c 64M /dev/zero > /dev/shm/big",
        "one_huge_file": "head -c 64M /dev/zero > big.bin",
        "many_files_fill_disk": "for i in $(seq 1 20); do head -c 3M /dev/zero > f$i || exit 1; done",
        "cpu_spin": "python3 -c 'while True: pass'",
        # killing or signalling the parent
        "kill_host_parent": f"kill -9 {me}",
        "kill_everything": "kill -9 -1",
        "python_kill_parent": f"python3 -c 'import os; os.kill({me}, 9)'",
        "pkill_root_processes": "pkill -9 -u root",
        # symlink, /proc and /dev escapes
        "symlink_shadow": "ln -s /etc/shadow leak && cat leak",
        "symlink_project": f"ln -s {PROJECT_FILE} leak2 && cat leak2",
        "symlink_root_dir": "ln -s / rootlink && cat rootlink/root/.bashrc",
        "proc_root_of_pid1": "cat /proc/1/root/etc/shadow",
        "proc_host_pid": f"cat /proc/{me}/status",
        "sysrq_trigger": "echo h > /proc/sysrq-trigger",
        "raw_disk": "ls /dev/vda /dev/sda 2>&1 && head -c 512 /dev/vda",
        "mknod_disk": "mknod disk b 8 0",
        "mount_tmpfs": "mount -t tmpfs none /mnt",
        "new_user_namespace": "unshare -r id",
        "cgroup_escape": "echo 100000 > /sys/fs/cgroup/pids/pids.max",
        # very long sleeps
        "long_sleep": "sleep 1000",
        "sleep_ignoring_signals": "trap '' TERM INT HUP; sleep 1000",
        "endless_output": "yes",
    }


CASE_NAMES = list(_cases({"canary": "", "tcp_port": 0, "udp_port": 0, "other": type("O", (), {"workspace": ""})()}))
NAMESPACE_MODES = ["bwrap", "unshare"]  # "rlimit" isolates nothing from the filesystem or network: not tested here


def need(mode: str) -> None:
    """Skip, saying why, when this machine cannot run ``mode`` (root is needed for the per-sandbox uid)."""
    ok, why = mode_works(mode)
    if not ok:
        pytest.skip(f"mode={mode} unavailable here: {why}")
    if os.geteuid() != 0:
        pytest.skip("the suite needs root: each sandbox drops to its own uid, which teardown checks")


def _shadow_line() -> str:
    try:
        return Path("/etc/shadow").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unreadable-shadow-marker"


def _run_case(host, name: str, mode: str) -> None:
    command = _cases(host)[name]
    with Sandbox(dataclasses.replace(CFG, mode=mode), name=f"hostile-{name}") as sb:
        sb.write_file("keep.txt", b"episode data")
        result = sb.run(command)
        # the episode gets an error observation or a timeout, never a silent success
        assert not result.ok, f"{name}: hostile command succeeded: {result.observation()}"
        assert SECRET not in result.output, f"{name}: leaked the host secret"
        assert _shadow_line() not in result.output, f"{name}: leaked /etc/shadow"
        assert "pwned" not in host["canary"].read_text()
        # nothing of this episode survives its command
        if sb.uid is not None:
            assert pids_of_uid(sb.uid) == set()
        # the sandbox still works afterwards
        assert sb.run("echo alive").output.strip() == "alive"
    # the host and the other episode are unaffected
    assert host["canary"].read_text() == SECRET
    assert _digest(PROJECT_FILE) == host["project_digest"]
    assert os.path.exists("/usr/bin/python3")
    assert subprocess.run(["true"]).returncode == 0
    assert host["other"].read_file("secret.txt", 100)[0] == SECRET.encode()
    assert host["other"].run("cat secret.txt").output.strip() == SECRET
    assert not host["accepted"], "a sandboxed command reached the host's loopback TCP server"
    with pytest.raises(OSError):
        host["udp"].recv(100)  # nothing was delivered to the host's UDP server


@pytest.mark.parametrize("name", CASE_NAMES)
@pytest.mark.parametrize("mode", NAMESPACE_MODES)
def test_hostile_command_contained(host, mode, name):
    need(mode)
    _run_case(host, name, mode)


def test_suite_has_at_least_30_cases():
    assert len(CASE_NAMES) >= 30


@pytest.mark.parametrize("mode", NAMESPACE_MODES)
def test_parallel_episodes_cannot_see_each_other(mode):
    need(mode)
    cfg = dataclasses.replace(CFG, mode=mode)
    a, b = Sandbox(cfg, name="par-a"), Sandbox(cfg, name="par-b")
    try:
        results = {}

        def work(sb, tag, other):
            sb.write_file(f"{tag}.txt", tag.encode())
            sb.run(f"echo {tag} > /dev/shm/{tag}.shm; echo {tag} > /tmp/{tag}.tmp")
            results[tag] = sb.run(f"ls -a /workspace; ls {other.workspace}/ 2>&1; cat {other.workspace}/*.txt 2>&1; "
                                  "ls /tmp /dev/shm; ps -e -o pid=,comm=")

        threads = [threading.Thread(target=work, args=(a, "alpha", b)), threading.Thread(target=work, args=(b, "beta", a))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert "alpha.txt" in results["alpha"].output and "beta" not in results["alpha"].output
        assert "beta.txt" in results["beta"].output and "alpha" not in results["beta"].output
    finally:
        a.close()
        b.close()


@pytest.fixture
def top_level_dir():
    """A fresh top-level host directory with a world-readable file: a checkout the sandbox cannot foresee."""
    path = f"/rollart-test-{os.getpid()}"
    os.makedirs(path)
    with open(f"{path}/secret.txt", "w") as f:
        f.write("top-level secret")
    os.chmod(f"{path}/secret.txt", 0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("mode", NAMESPACE_MODES)
def test_unknown_top_level_dirs_hidden_and_binds_read_only(top_level_dir, mode):
    need(mode)
    tool = Path(top_level_dir) / "tool"  # bound in although its parent is hidden
    tool.mkdir()
    (tool / "data.txt").write_text("tool data")
    os.chmod(tool, 0o755)
    os.chmod(tool / "data.txt", 0o644)
    cfg = dataclasses.replace(CFG, mode=mode, extra_ro_binds={str(tool): "/opt/tool"})
    with Sandbox(cfg, name="topdir") as sb:
        r = sb.run(f"cat {top_level_dir}/secret.txt; ls -A {top_level_dir}")
        assert "top-level secret" not in r.output and "No such file" in r.output
        assert sb.run("cat /opt/tool/data.txt").output.strip() == "tool data"
        assert not sb.run("echo x > /opt/tool/new.txt").ok
        assert not sb.run(f"mkdir -p {top_level_dir} && echo x > {top_level_dir}/new.txt").ok
    assert os.listdir(tool) == ["data.txt"] and sorted(os.listdir(top_level_dir)) == ["secret.txt", "tool"]
