"""rollart.models.cpu_linear: prepacked oneDNN linears equal F.linear, stale packs are never used silently, and
the path per dtype follows what the CPU can run (the fallback forced, or oneDNN capped below bf16)."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from rollart import cpu_features
from rollart.models import cpu_linear


def need_packed(dtype):
    if why := cpu_linear.unavailable(dtype):
        pytest.skip(f"packed oneDNN path for {dtype} unavailable on this CPU ({cpu_features.cpu_features().describe()}): {why}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_packed_linear_equals_f_linear(dtype, rows):
    need_packed(dtype)
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(96, 40, generator=g).to(dtype), torch.randn(96, generator=g).to(dtype)
    x = torch.randn(rows, 40, generator=g).to(dtype)
    lin = cpu_linear.PackedLinears.onednn(batch_hint=16)
    lin.pack([w])
    torch.testing.assert_close(lin(x, w, b), F.linear(x, w, b), rtol=1e-5 if dtype == torch.float32 else 1e-2,
                               atol=1e-5 if dtype == torch.float32 else 1e-2)
    other = torch.randn(8, 40).to(dtype)                                  # never packed: plain F.linear
    assert torch.equal(lin(x, other), F.linear(x, other))


def test_repack_follows_in_place_weight_changes():
    need_packed(torch.float32)
    w = torch.randn(32, 16)
    x = torch.randn(4, 16)
    lin = cpu_linear.PackedLinears.onednn(batch_hint=4)
    lin.pack([w])
    w.mul_(2)
    lin.pack([w])
    torch.testing.assert_close(lin(x, w), F.linear(x, w))


def test_forced_fallback_serves_every_dtype_with_f_linear_and_says_why(portable_cpu):
    cpu = cpu_features.cpu_features()
    assert cpu.forced_portable and not (cpu.avx512 or cpu.native_bf16 or cpu.onednn_bf16 or cpu.amx)
    for dtype in (torch.float32, torch.bfloat16):
        assert cpu_linear.unavailable(dtype) == "ROLLART_PORTABLE_CPU=1"
        assert cpu_linear.path(torch.device("cpu"), dtype) == cpu_linear.FALLBACK
    line = cpu_linear.describe(torch.bfloat16)
    assert "float32 -> F.linear (ROLLART_PORTABLE_CPU=1)" in line and "bfloat16 -> F.linear" in line


def test_bf16_asked_for_on_a_cpu_without_native_bf16_is_said_in_one_line(portable_cpu, caplog):
    from rollart import devices
    devices._warn_bf16_without_native.cache_clear()
    with caplog.at_level("WARNING", logger="rollart.devices"):
        assert devices.resolve_dtype("bfloat16", torch.device("cpu"), key="engine.dtype") is torch.bfloat16
        assert devices.resolve_dtype("auto", torch.device("cpu"), key="engine.dtype") is torch.float32
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("engine.dtype=bfloat16 on a CPU without native bf16")
    assert "x the time of a float32 one here" in lines[0]
    devices._warn_bf16_without_native.cache_clear()


ISA_CAPPED = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
"""oneDNN and torch's kernels limited to AVX2: on any x86 CPU, torch then refuses oneDNN's bf16 path as it does on a
CPU without AVX-512 (the error that broke bf16 engines there)."""


@pytest.mark.skipif(not cpu_features.cpu_features().onednn_bf16, reason="this CPU has no oneDNN bf16 path to cap")
def test_a_cpu_whose_onednn_lacks_bf16_gets_the_fallback_and_a_bf16_engine_runs(tmp_path):
    code = f"""
import torch
from rollart.engine import EngineConfig, LLMEngine
from rollart.models import cpu_linear
from rollart.tools.make_tiny_model import make_tiny_model
from rollart.types import SamplingParams
try:
    torch.ops.mkldnn._reorder_linear_weight(torch.randn(8, 16).bfloat16(), 2)
    print("raised=no")
except RuntimeError:
    print("raised=yes")
print("bf16_unavailable=" + cpu_linear.unavailable(torch.bfloat16))
print("fp32_path=" + cpu_linear.path(torch.device("cpu"), torch.float32))
engine = LLMEngine(EngineConfig(model=str(make_tiny_model({str(tmp_path)!r}, seed=11)), device="cpu",
                                dtype="bfloat16", num_kv_blocks=16, kernels="torch"))  # the oneDNN matmul path
out = engine.generate([[3, 4, 5, 6]], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))[0]
print("packed=" + str(engine.runner.packed is not None))
print("tokens=" + str(len(out.token_ids)))
"""
    env = {**os.environ, **ISA_CAPPED}
    env.pop(cpu_features.PORTABLE_ENV, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert lines["raised"] == "yes"                                  # the failure the fallback exists for
    assert "avx512bw" in lines["bf16_unavailable"]
    assert lines["fp32_path"] == cpu_linear.PACKED                   # fp32 keeps its packed path there
    assert (lines["packed"], lines["tokens"]) == ("False", "6")      # the bf16 engine starts and generates
    assert "bfloat16 -> F.linear (oneDNN bf16 needs" in out.stderr   # and says which path serves it
