"""tools/bench/gpu_engine.py on a tiny model on the CPU: the code path a GPU run takes (engine, plain loop, HF
generate side by side) produces every ratio from real generations; without CUDA its main says skipped=no_cuda."""
import subprocess
import sys
from pathlib import Path

import torch

from bench_modules import bench_module

ROOT = Path(__file__).resolve().parents[2]


def test_measure_engine_tiny_on_cpu():
    measure_engine = bench_module("gpu_engine").measure_engine
    res = measure_engine((2, 4), device="cpu", tiny=True, hf_batch=4, prompt_len=16, new_tokens=8, log=lambda *_: None)
    for b in (2, 4):
        row = res["batches"][b]
        assert row["engine"]["tokens"] == row["plain"]["tokens"] == b * 8
        assert res[f"engine_vs_plain_b{b}"] > 0 and row["engine"]["step_s"] > 0
    assert res["batches"][4]["hf"]["tokens"] == 32 and res["engine_vs_hf_b4"] > 0
    assert "decode_roofline_frac" not in res                               # no HBM bandwidth on a CPU
    prof = res["batches"][4]["profile"]                                     # where a decode step's time goes
    assert prof["batch"] == 4 and prof["timed"] == "host" and prof["step_s"] > 0
    assert prof["top"] and all(s > 0 and n >= 1 for _, s, n in prof["top"])
    assert sum(s for _, s, _ in prof["top"]) <= prof["step_s"] * 1.5      # own times: not counted twice over
    host = prof["host_s"]
    assert set(host) == {"schedule", "forward", "sample", "rest"} and host["forward"] > 0 and host["schedule"] > 0
    assert sum(host.values()) <= prof["step_s"] * 1.05


def test_main_without_gpu_says_skipped():
    if torch.cuda.is_available():
        return
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "gpu_engine.py"), "--quick"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "skipped=no_cuda"
