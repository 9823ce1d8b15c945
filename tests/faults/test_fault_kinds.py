"""The env-host kill, full-disk checkpoint and malformed-frame faults end to end, each on its real short run under
``--quick`` (slow: 25-40 s each on 2 cores): the host restarts and nothing accepted is lost, a checkpoint the full
disk refused leaves the one before as the newest and training goes on, and every malformed frame is counted."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fault,expected", [
    ("env_host_kill", {"env_host_kill_lost": "0"}),
    ("disk_full_ckpt", {"disk_full_ckpt_survived": "1"}),
    ("malformed_frames", {"malformed_frames_survived": "10000", "malformed_frames_uncounted": "0"}),
])
def test_fault_reads_as_a_fault_tolerant_systems(tmp_path, fault, expected):
    out = subprocess.run([sys.executable, "-m", "rollart.faults", "--quick", "--only", fault, "--workdir",
                          str(tmp_path)], capture_output=True, text=True, timeout=600)
    lines = out.stdout.strip().splitlines()
    assert dict(item.split("=", 1) for item in lines[-1].split()) == expected, out.stdout + out.stderr
    assert out.returncode == 0 and all(line.startswith("ok ") for line in lines[1:-2]), out.stdout
