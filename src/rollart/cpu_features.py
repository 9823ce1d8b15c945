"""What this CPU can run, asked once per process: every rollart path that depends on a CPU feature decides here.

x86-64 machines of one kind differ: some have AVX-512 (and bf16 instructions, AMX), some only AVX2. oneDNN's
bf16 kernels need avx512bw/vl/dq or avx_ne_convert; without them torch raises where rollart would use them.
``ROLLART_PORTABLE_CPU=1`` makes every such path take its portable fallback, as on a CPU without AVX-512, AMX
or avx_ne_convert, so both sides are tested on any machine (the instructions torch itself dispatches to are
unchanged: this is rollart's choice of path, not an emulated CPU).
"""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

PORTABLE_ENV = "ROLLART_PORTABLE_CPU"


def portable_forced() -> bool:
    return os.environ.get(PORTABLE_ENV, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class CpuFeatures:
    name: str
    """The CPU's model name (``/proc/cpuinfo``), for figures that name the CPU they were measured on."""
    capability: str
    """torch's vectorisation level on this CPU (``torch.backends.cpu.get_cpu_capability()``: AVX512, AVX2, ...)."""
    avx512: bool
    avx512_bf16: bool
    amx: bool
    onednn_bf16: bool
    """oneDNN runs bf16 kernels here (avx512bw+vl+dq or avx_ne_convert): the packed linear path can take bf16."""
    onednn_fp16: bool
    forced_portable: bool
    """``ROLLART_PORTABLE_CPU=1``: every feature above reads False."""

    @property
    def native_bf16(self) -> bool:
        """bf16 dot products in hardware (avx512_bf16 or AMX) that oneDNN uses: only there is bf16 compute
        cheaper than fp32's; elsewhere torch converts bf16 through fp32 (``bf16_linear_slowdown`` measures it)."""
        return self.onednn_bf16 and (self.avx512_bf16 or self.amx)

    def describe(self) -> str:
        flags = [f for f, on in (("avx512", self.avx512), ("avx512_bf16", self.avx512_bf16), ("amx", self.amx))
                 if on] or ["no avx512/amx"]
        forced = f", {PORTABLE_ENV}=1" if self.forced_portable else ""
        return f"{self.name} ({self.capability}, {' '.join(flags)}{forced})"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def cpu_features() -> CpuFeatures:
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if portable_forced():
        return CpuFeatures(cpu_name(), capability, False, False, False, False, False, True)

    def ask(fn) -> bool:
        try:
            return bool(fn())
        except (AttributeError, RuntimeError):
            return False

    onednn = torch.backends.mkldnn.is_available()
    return CpuFeatures(
        name=cpu_name(), capability=capability,
        avx512=capability.startswith("AVX512") and ask(torch.cpu._is_avx512_supported),
        avx512_bf16=capability.startswith("AVX512") and ask(torch.cpu._is_avx512_bf16_supported),
        amx=capability.startswith("AVX512") and ask(torch.cpu._is_amx_tile_supported),
        onednn_bf16=onednn and ask(torch.ops.mkldnn._is_mkldnn_bf16_supported),
        onednn_fp16=onednn and ask(torch.ops.mkldnn._is_mkldnn_fp16_supported),
        forced_portable=False)


@functools.cache
def bf16_linear_slowdown() -> float:
    """Time of a bf16 ``F.linear`` over an fp32 one on this CPU (16 x 576 -> 1536, one thread, best of 10):
    measured once per process, for the line that tells a user asking for bf16 where it does not pay."""
    import time

    import torch
    import torch.nn.functional as F

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = {}
        for dtype in (torch.float32, torch.bfloat16):
            x, w = torch.randn(16, 576).to(dtype), torch.randn(1536, 576).to(dtype)
            F.linear(x, w)
            runs = []
            for _ in range(10):
                t0 = time.perf_counter()
                F.linear(x, w)
                runs.append(time.perf_counter() - t0)
            best[dtype] = min(runs)
    finally:
        torch.set_num_threads(threads)
    return best[torch.bfloat16] / best[torch.float32]
