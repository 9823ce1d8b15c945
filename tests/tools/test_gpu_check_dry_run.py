"""tools/gpu/check.sh --dry-run on this CPU machine, so the GPU check cannot rot between the rare GPU runs: the wheel
folder is made by tools/gpu/wheels.sh (for this Python), the check installs rollart from it into a venv over this
interpreter's packages (this interpreter is itself a venv, as the GPU image's python3 is), the cuda tests skip,
the GPU bench says skipped=no_cuda and the quickstart trains 2 steps on the CPU."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_gpu_check_dry_run_passes_every_stage(tmp_path):
    if sys.prefix == sys.base_prefix:
        pytest.skip("the check builds its venv over a venv's packages: run the tests from one")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHON=sys.executable, PYVER=f"{sys.version_info.major}.{sys.version_info.minor}")
    wheels = tmp_path / "wheels"
    made = subprocess.run(["bash", str(ROOT / "tools/gpu/wheels.sh"), str(wheels)], env=env, capture_output=True,
                          text=True, timeout=600)
    if made.returncode != 0 and "No matching distribution" in made.stderr + made.stdout:
        pytest.skip(f"the wheel folder cannot be made here (no package index): {made.stderr.strip()[-300:]}")
    assert made.returncode == 0, made.stderr[-3000:]
    out = tmp_path / "check"
    run = subprocess.run(["bash", str(ROOT / "tools/gpu/check.sh"), "--dry-run", str(out), str(wheels)], env=env,
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    summary = (out / "summary.txt").read_text() if (out / "summary.txt").exists() else ""
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert summary.split() == ["install:", "passed", "cuda_tests:", "passed", "bench:", "passed", "quickstart:",
                               "passed"], summary
    assert "skipped=no_cuda" in (out / "bench_gpu.log").read_text()
    assert "final_success=" in (out / "quickstart.log").read_text()
    assert str(out / "venv") in (out / "install.log").read_text()  # rollart came from the check's venv
