"""Security suite in the "unshare" fallback mode: the same hostile commands, contained without bubblewrap."""
import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from rollart.sandbox import Sandbox
from rollart.sandbox.isolation import mode_works
from tests.sandbox.test_security import CASE_NAMES, CFG, UNSHARE_FAST, _run_case, host  # noqa: F401 (fixture)


@pytest.mark.parametrize("name", UNSHARE_FAST)
def test_hostile_command_contained_unshare_fallback(host, name):
    if not mode_works("unshare")[0] or os.geteuid() != 0:
        pytest.skip("unshare fallback needs util-linux unshare and root (for the uid drop)")
    _run_case(host, name, "unshare")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CASE_NAMES if n not in UNSHARE_FAST])
def test_hostile_command_contained_unshare_fallback_rest(host, name):
    if not mode_works("unshare")[0] or os.geteuid() != 0:
        pytest.skip("unshare fallback needs util-linux unshare and root (for the uid drop)")
    _run_case(host, name, "unshare")


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


def test_unshare_hides_unknown_top_level_dirs_and_carries_binds_read_only(top_level_dir):
    if not mode_works("unshare")[0] or os.geteuid() != 0:
        pytest.skip("unshare fallback needs util-linux unshare and root (for the uid drop)")
    tool = Path(top_level_dir) / "tool"  # bound in although its parent is hidden
    tool.mkdir()
    (tool / "data.txt").write_text("tool data")
    os.chmod(tool, 0o755)
    os.chmod(tool / "data.txt", 0o644)
    cfg = dataclasses.replace(CFG, mode="unshare", extra_ro_binds={str(tool): "/opt/tool"})
    with Sandbox(cfg, name="unshare-topdir") as sb:
        assert "top-level secret" not in sb.run(f"cat {top_level_dir}/secret.txt").output
        assert sb.run(f"ls -A {top_level_dir} | wc -l").output.split()[0] == "0"  # an empty overlay
        assert sb.run("cat /opt/tool/data.txt").output.strip() == "tool data"
        assert not sb.run("echo x > /opt/tool/new.txt").ok
        assert not sb.run(f"echo x > {top_level_dir}/new.txt").ok
    assert os.listdir(tool) == ["data.txt"] and sorted(os.listdir(top_level_dir)) == ["secret.txt", "tool"]
