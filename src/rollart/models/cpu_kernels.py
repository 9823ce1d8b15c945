"""rollart's C kernels for the CPU engine, built on first use and called through ctypes.

The kernels (``csrc/cpu_kernels.c``): causal attention of packed queries (prefill chunks and decodes in one call)
read straight from the paged KV cache, a tile of keys at a time with an online softmax (no gathered copy of the
keys, no padding, no mask tensor; the query heads of one kv head read its keys once); sampling with the behaviour
logprob; two of each layer's elementwise steps, the MLP's silu(gate) * up and RoPE with the cache write of k
and v; and the matmuls, on weights packed once into panels whose sums stay in registers while the next panel is
fetched (bf16 through the CPU's bf16 dot product where it has one). torch's CPU ops for these take several passes
over memory each (a gather, a dtype conversion, a masked SDPA per length bucket; log_softmax, then a softmax and a
cumsum per row; a tensor per elementwise op); here each is one. At a decode step's few rows oneDNN's matmul leaves
the weight stream waiting on its arithmetic; these overlap the two (``tools/bench/vllm_engine.py`` measures the
step).

The library is compiled once per source, compiler and CPU with the system C compiler (``cc -O3 -march=native
-fopenmp``) into ``$XDG_CACHE_HOME/rollart/kernels`` (``~/.cache`` by default) and loaded by later processes in
milliseconds; its OpenMP runtime is the one torch already loaded, and every call takes torch's thread count.
Where there is no compiler, or the build fails, :func:`unavailable` says why and the engine runs torch's ops
(``EngineConfig.kernels``). ``ROLLART_PORTABLE_CPU=1`` builds for x86-64-v3 (AVX2, no AVX-512), as on a CPU
without AVX-512, so that build is tested on any x86 machine.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from rollart.cpu_features import PORTABLE_ENV, cpu_features, cpu_name, portable_forced
from rollart.models.cpu_layers import DecoderLayers
from rollart.models.cpu_linear import PackedLinears
from rollart.models.paged_ops import PagedOps, rope_and_cache, silu_and_mul

SOURCE = Path(__file__).with_name("csrc") / "cpu_kernels.c"
COMPILE_TIMEOUT_S = 120
DTYPES = {torch.float32: 0, torch.bfloat16: 1}
"""Cache and query dtypes the kernels read (code passed to C); other dtypes take torch's ops."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rollart" / "kernels"


def march() -> str:
    """What the library is built for: this CPU, or AVX2 where ``ROLLART_PORTABLE_CPU=1`` asks for the portable
    build (x86-64 only; other machines build for themselves)."""
    if portable_forced() and platform.machine() in ("x86_64", "AMD64"):
        return "x86-64-v3"
    return "native"


def compile_command(compiler: str, out: Path, arch: str) -> list[str]:
    return [compiler, "-O3", f"-march={arch}", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-shared",
            "-fPIC", "-o", str(out), str(SOURCE)]


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln for ln in f if ln.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()


def build(arch: str | None = None) -> Path:
    """Path of the compiled library for ``arch`` (default :func:`march`), compiling it if this source, compiler
    and CPU have none yet. Raises RuntimeError (one line, what to do) where it cannot be built."""
    arch = arch or march()
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler (cc) on PATH: install gcc to build rollart's CPU kernels")
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError as e:
        raise RuntimeError(f"C compiler {compiler} cannot run ({e}): install gcc or set CC") from None
    key = hashlib.sha256("\0".join([SOURCE.read_text(), version, arch, cpu_name(), _cpu_flags(),
                                    " ".join(compile_command("cc", Path("x"), arch))]).encode()).hexdigest()[:16]
    lib = cache_dir() / f"cpu_kernels-{key}.so"
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=lib.parent)  # concurrent builders each write their own file,
    os.close(fd)                                             # then one atomic rename wins
    try:
        r = subprocess.run(compile_command(compiler, Path(tmp), arch), capture_output=True, text=True,
                           timeout=COMPILE_TIMEOUT_S)
        if r.returncode != 0:
            first = (r.stderr.strip().splitlines() or ["(no output)"])[0]
            raise RuntimeError(f"{compiler} could not build {SOURCE.name} for -march={arch}: {first}")
        os.replace(tmp, lib)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{compiler} took over {COMPILE_TIMEOUT_S} s to build {SOURCE.name}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


class Kernels:
    """The loaded library's entry points, typed."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        p, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
        self.lib.rl_paged_attention.argtypes = [p, i64, p, i64, p, p, p, i64, p, p, i32, i32, i32, i32, i32, f32,
                                                i32, i32]
        self.lib.rl_paged_attention.restype = i32
        self.lib.rl_sample_rows.argtypes = [p, i64, i32, i32, p, p, p, p, i32]
        self.lib.rl_sample_rows.restype = i32
        self.lib.rl_silu_and_mul.argtypes = [p, i64, p, i64, i32, i32, i32]
        self.lib.rl_silu_and_mul.restype = i32
        self.lib.rl_rope_and_cache.argtypes = [p, i64, i64, i32, i32, i32, p, p, i64, p, p, p, i32, i32]
        self.lib.rl_rope_and_cache.restype = i32
        self.lib.rl_pack_linear.argtypes = [p, i64, i32, i32, p, i32, i32]
        self.lib.rl_pack_linear.restype = i32
        self.lib.rl_linear.argtypes = [p, i64, i64, i32, p, i32, p, p, i64, i32, i32]
        self.lib.rl_linear.restype = i32
        self.lib.rl_linear_packed_size.argtypes = [i32, i32, i32]
        self.lib.rl_linear_packed_size.restype = i64
        self.lib.rl_decoder_layers.argtypes = [p, i32, p, i64, i32, i32, i32, i32, i32, p, p, i64, p, p, i64, p, i64,
                                               p, p, i32, i32, f32, f32, i32, i32]
        self.lib.rl_decoder_layers.restype = i32
        self.panel_columns = self.lib.rl_linear_panels()
        """Output columns per panel of a packed weight (the build's vector width times two)."""

    def paged_ops(self, linear) -> PagedOps:
        """The engine path's ops with these kernels, and ``linear`` for the matmuls."""
        return PagedOps(linear=linear, silu_and_mul=self.silu_and_mul, rope_and_cache=self.rope_and_cache)

    def attention(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, query_start: Tensor, context_lens: Tensor,
                  block_tables: Tensor) -> Tensor:
        """Causal attention of the packed queries q (N, H, D) over the paged cache (blocks, block_size, Hkv, D),
        which already holds this step's keys: sequence s owns rows query_start[s]:query_start[s+1], the last of its
        context_lens[s] tokens, its blocks listed in block_tables[s] -> (N, H, D) in q's dtype."""
        N, H, D = q.shape
        _, bs, Hkv, Dk = k_cache.shape
        if not (q.stride(2) == 1 and q.stride(1) == D and Dk == D and k_cache.is_contiguous()
                and v_cache.is_contiguous() and q.dtype == k_cache.dtype == v_cache.dtype and q.dtype in DTYPES):
            raise ValueError("attention: q (N, H, D) with contiguous heads, contiguous caches of q's dtype "
                             f"({list(DTYPES)})")
        for t in (query_start, context_lens, block_tables):
            if t.dtype != torch.int64 or t.device.type != "cpu":
                raise ValueError("attention: index tensors must be int64 on the CPU")
        query_start, context_lens = query_start.contiguous(), context_lens.contiguous()  # held until the call ends
        block_tables = block_tables if block_tables.stride(-1) == 1 else block_tables.contiguous()
        out = torch.empty(N, H, D, dtype=q.dtype)
        rc = self.lib.rl_paged_attention(
            q.data_ptr(), q.stride(0), out.data_ptr(), out.stride(0), k_cache.data_ptr(), v_cache.data_ptr(),
            block_tables.data_ptr(), block_tables.stride(0), query_start.data_ptr(), context_lens.data_ptr(),
            context_lens.shape[0], H, Hkv, D, bs, D ** -0.5, DTYPES[q.dtype], torch.get_num_threads())
        if rc != 0:
            raise RuntimeError(f"rl_paged_attention failed (code {rc}: {'bad shapes' if rc == -1 else 'out of memory'};"
                               f" H={H}, Hkv={Hkv}, D={D})")
        return out

    def silu_and_mul(self, gate_up: Tensor) -> Tensor:
        """gate_up (N, 2I), gate then up in each row -> silu(gate) * up (N, I), in gate_up's dtype; where this
        kernel cannot read the input (another dtype, strided rows), torch computes it."""
        N, two_i = gate_up.shape
        if gate_up.dtype not in DTYPES or gate_up.stride(1) != 1 or two_i % 2:
            return silu_and_mul(gate_up)
        out = torch.empty(N, two_i // 2, dtype=gate_up.dtype)
        rc = self.lib.rl_silu_and_mul(gate_up.data_ptr(), gate_up.stride(0), out.data_ptr(), N, two_i // 2,
                                      DTYPES[gate_up.dtype], torch.get_num_threads())
        if rc != 0:
            raise RuntimeError(f"rl_silu_and_mul failed (code {rc})")
        return out

    def rope_and_cache(self, qkv: Tensor, n_heads: int, n_kv: int, rotary, cos: Tensor, sin: Tensor, kv: Tensor,
                       slot_mapping: Tensor) -> Tensor:
        """As ``rollart.models.paged_ops.rope_and_cache`` (q rotated in place in qkv); where this kernel cannot
        read the inputs, torch computes it."""
        N, heads, D = qkv.shape
        k_cache, v_cache = kv[0], kv[1]
        if not (qkv.dtype in DTYPES and qkv.stride(2) == 1 and qkv.stride(1) == D and heads == n_heads + 2 * n_kv
                and cos.dtype == sin.dtype == qkv.dtype and cos.shape == sin.shape == (N, 1, D)
                and cos.stride() == sin.stride() and cos.stride(-1) == 1 and k_cache.dtype == qkv.dtype
                and k_cache.is_contiguous() and v_cache.is_contiguous() and slot_mapping.dtype == torch.int64):
            return rope_and_cache(qkv, n_heads, n_kv, rotary, cos, sin, kv, slot_mapping)
        slot_mapping = slot_mapping.contiguous()
        rc = self.lib.rl_rope_and_cache(qkv.data_ptr(), qkv.stride(0), N, n_heads, n_kv, D, cos.data_ptr(),
                                        sin.data_ptr(), cos.stride(0), slot_mapping.data_ptr(), k_cache.data_ptr(),
                                        v_cache.data_ptr(), DTYPES[qkv.dtype], torch.get_num_threads())
        if rc != 0:
            raise RuntimeError(f"rl_rope_and_cache failed (code {rc})")
        return qkv[:, :n_heads]

    def pack_linear(self, weight: Tensor) -> Tensor:
        """weight (N, K), rows contiguous, float32 or bfloat16 -> its panels for :meth:`linear` (the same dtype,
        N rounded up to whole panels)."""
        N, K = weight.shape
        if weight.dtype not in DTYPES or weight.stride(1) != 1:
            raise ValueError(f"pack_linear: a (N, K) weight with contiguous rows in {list(DTYPES)}")
        out = torch.empty(self.lib.rl_linear_packed_size(N, K, DTYPES[weight.dtype]), dtype=weight.dtype)
        self.lib.rl_pack_linear(weight.data_ptr(), weight.stride(0), N, K, out.data_ptr(), DTYPES[weight.dtype],
                                torch.get_num_threads())
        return out

    def linear(self, x: Tensor, packed: Tensor, n: int, bias: Tensor | None = None) -> Tensor:
        """x (M, K) @ W^T (+ bias) with W (n, K) packed by :meth:`pack_linear`, in x's dtype (the weight's)."""
        M, K = x.shape
        if x.dtype != packed.dtype or packed.numel() != self.lib.rl_linear_packed_size(n, K, DTYPES[x.dtype]):
            raise ValueError(f"linear: x ({M}, {K}) {x.dtype} does not fit a packed ({n}, {K}) {packed.dtype} weight")
        if x.stride(1) != 1:
            x = x.contiguous()
        if bias is not None:
            bias = bias.to(x.dtype).contiguous()
        out = torch.empty(M, n, dtype=x.dtype)
        rc = self.lib.rl_linear(x.data_ptr(), x.stride(0), M, K, packed.data_ptr(), n,
                                bias.data_ptr() if bias is not None else None, out.data_ptr(), n, DTYPES[x.dtype],
                                torch.get_num_threads())
        if rc != 0:
            raise RuntimeError(f"rl_linear failed (code {rc}: out of memory)")
        return out

    def linears(self) -> PackedLinears:
        """The engine's matmuls through :meth:`linear`, every weight packed once (and again after each update); from
        ``GEMM_ROWS`` rows on (a prefill), torch's GEMM where :func:`gemm_rows_go_to_torch` says so."""
        to_torch = {dtype: gemm_rows_go_to_torch(dtype) for dtype in DTYPES}

        def apply(x: Tensor, packed: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
            if x.shape[0] >= GEMM_ROWS and to_torch[x.dtype]:
                return torch.nn.functional.linear(x, w, bias)
            return self.linear(x, packed, w.shape[0], bias)

        return PackedLinears(self.pack_linear, apply)

    def decoder_layers(self, model, packed: PackedLinears, dtype: torch.dtype) -> DecoderLayers:
        """``PagedOps.layers`` for ``model``, whose matmuls :meth:`linears` (``packed``) serves; steps of
        ``GEMM_ROWS`` rows or more take the layer loop where their matmuls go to torch."""
        return DecoderLayers(self.lib, DTYPES, model, packed, GEMM_ROWS if gemm_rows_go_to_torch(dtype) else None)

    def sample_rows(self, logits: Tensor, temperature: Tensor, uniform: Tensor) -> tuple[Tensor, Tensor]:
        """logits (R, V) float32, temperature (R,) float32 (0: greedy), uniform (R,) float64 in [0, 1) ->
        (tokens (R,) int64, log_softmax(logits)[token] (R,) float32)."""
        R, V = logits.shape
        if logits.dtype != torch.float32 or logits.stride(1) != 1:
            raise ValueError("sample_rows: float32 logits with contiguous rows")
        temperature, uniform = temperature.contiguous(), uniform.contiguous()
        tokens, logprobs = torch.empty(R, dtype=torch.int64), torch.empty(R, dtype=torch.float32)
        rc = self.lib.rl_sample_rows(logits.data_ptr(), logits.stride(0), R, V, temperature.data_ptr(),
                                     uniform.data_ptr(), tokens.data_ptr(), logprobs.data_ptr(), torch.get_num_threads())
        if rc != 0:
            raise RuntimeError(f"rl_sample_rows failed (code {rc})")
        return tokens, logprobs


GEMM_ROWS = 512
"""From this many rows on, a matmul has work enough for a GEMM library's cache blocking (MKL's, oneDNN's), which
keeps a block of rows in cache across the weight's panels where :meth:`Kernels.linear` streams every row once per
panel: on an AVX2-only AMD EPYC, one thread, fp32 576 -> 1536 over 30 distinct weights, torch's GEMM reached 55-57
GFLOP/s at 512-2048 rows against the C kernel's 40-43. A decode step's few rows stay in C: over every matmul of a
SmolLM2 step at 16 rows (``tools/bench/cpu_linear.py``) the C kernel was 2.22x torch's fp32 GEMM on that CPU."""


def gemm_rows_go_to_torch(dtype: torch.dtype) -> bool:
    """Whether torch's GEMM takes the matmuls of ``GEMM_ROWS`` rows or more in ``dtype``: in float32 always; in
    bfloat16 only where the CPU multiplies bf16 natively (elsewhere torch converts through fp32 at ~7 GFLOP/s, a
    quarter of the C kernel's rate on that EPYC)."""
    return dtype == torch.float32 or (dtype == torch.bfloat16 and cpu_features().native_bf16)


_failure: dict[str, str] = {}


@functools.cache
def load(arch: str) -> Kernels | None:
    """The kernels built for ``arch`` (built or loaded once per process), or None where they cannot be built."""
    try:
        return Kernels(build(arch))
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        _failure[arch] = str(e).splitlines()[0]
        return None


def kernels() -> Kernels | None:
    """The kernels for this process's CPU (:func:`march`), or None where they cannot be built."""
    return load(march())


def unavailable() -> str:
    """Why the kernels cannot run here, or '' where they can."""
    return "" if kernels() is not None else _failure.get(march(), "not built")


def describe() -> str:
    """One line for the engine's start: what serves attention and sampling on this CPU."""
    why = unavailable()
    if why:
        return f"attention and sampling -> torch ops ({why})"
    forced = f", {PORTABLE_ENV}=1" if portable_forced() else ""
    return f"attention and sampling -> rollart C kernels (-march={march()}{forced})"
