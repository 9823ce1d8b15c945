"""The shared sandbox toolchain cache: superseded copies and crash leftovers are removed, a copy a live
process holds is kept, and the lock files are out of a sandboxed command's reach."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rollart.sandbox import Sandbox, SandboxConfig
from rollart.sandbox.isolation import mode_works

# each process prepares a toolchain of these packages; two sets = two cache keys (as a new venv makes)
OLD, NEW = ("iniconfig",), ("iniconfig", "packaging")
PREPARE = """
import sys
from pathlib import Path
from rollart.sandbox.toolchain import prepare_toolchain
print(prepare_toolchain(Path(sys.argv[1]), tuple(sys.argv[2:])), flush=True)
sys.stdin.read()  # the holder keeps its copy in use until the test closes our stdin
"""


def _prepare(root: Path, packages: tuple[str, ...]) -> Path:
    """A separate process prepares (and so may retire) toolchains, then exits."""
    out = subprocess.run([sys.executable, "-c", PREPARE, str(root), *packages], input="", text=True,
                         capture_output=True, timeout=120, check=True)
    return Path(out.stdout.strip())


def _copies(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if "toolchain-" in p.name)


def test_a_superseded_copy_and_crash_leftovers_are_removed(tmp_path):
    old = _prepare(tmp_path, OLD)
    assert (old / "site" / "iniconfig").is_dir()
    # what crashed processes leave: a half-built copy and a half-deleted one
    (tmp_path / ".toolchain-feedfacefeedface-abc123" / "site").mkdir(parents=True)
    (tmp_path / ".trash-toolchain-0123456789abcdef-999").mkdir()
    new = _prepare(tmp_path, NEW)
    assert new != old and (new / "site" / "packaging").is_dir()
    assert _copies(tmp_path) == [new.name]
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == [f"{new.name}.lock"]


def test_a_copy_in_use_by_a_live_process_is_kept_until_it_exits(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", PREPARE, str(tmp_path), *OLD], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        held = Path(holder.stdout.readline().strip())
        new = _prepare(tmp_path, NEW)
        assert _copies(tmp_path) == sorted([held.name, new.name])  # the holder's copy survived
        assert (held / "site" / "iniconfig" / "__init__.py").is_file()
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    again = _prepare(tmp_path, NEW)  # nobody holds the old copy any more
    assert again == new and _copies(tmp_path) == [new.name]


def test_rebuilds_a_copy_retired_between_two_processes(tmp_path):
    first = _prepare(tmp_path, OLD)
    _prepare(tmp_path, NEW)
    assert not first.exists()
    assert _prepare(tmp_path, OLD) == first and (first / "site" / "iniconfig").is_dir()


@pytest.fixture
def open_root():
    """A sandbox root a dropped sandbox uid can traverse (pytest's tmp_path is 0700)."""
    root = Path(tempfile.mkdtemp(prefix="rollart-toolchain-test-"))
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("mode", ["bwrap", "rlimit"])
def test_sandboxed_commands_cannot_touch_the_cache_or_its_locks(open_root, mode):
    if not mode_works(mode)[0]:
        pytest.skip(f"{mode} unavailable here: {mode_works(mode)[1]}")
    if mode == "rlimit" and os.geteuid() != 0:
        pytest.skip("rlimit mode isolates files only with a dropped uid (needs root)")
    cfg = SandboxConfig(mode=mode, root_dir=str(open_root), python_packages=OLD, timeout_s=20.0,
                        memory_mb=256, disk_mb=16)
    with Sandbox(cfg) as sb:
        lock = open_root / "locks" / f"{sb.toolchain.name}.lock"
        assert lock.is_file() and (os.stat(open_root / "locks").st_mode & 0o777) == 0o700
        assert sb.run("python3 -c 'import iniconfig'").ok  # the copy serves the sandbox
        site_pkg = f"{sb.paths.site}/iniconfig/__init__.py"
        assert not sb.run(f"echo 'raise SystemExit' >> {site_pkg}").ok
        take_lock = f"python3 -c \"import fcntl, os; fcntl.flock(os.open('{lock}', os.O_RDONLY), fcntl.LOCK_EX)\""
        assert not sb.run(take_lock).ok
    assert "raise SystemExit" not in (sb.toolchain / "site" / "iniconfig" / "__init__.py").read_text()
