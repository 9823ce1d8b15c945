"""rollart's C kernels (native and AVX2 builds) equal the pure-torch references: paged attention over mixed prefill,
decode and chunked-with-cached-prefix sequences (GQA, keys across blocks, head dims on and off the vector width,
float32 and bfloat16, one and two threads); sampling's tokens, greedy rows and behaviour logprobs; a failed build
is a named reason, not a crash."""
import platform

import pytest
import torch

from rollart.engine.sampler import sample
from rollart.models import cpu_kernels
from rollart.types import SamplingParams

from paged_cases import random_case

ARCHES = ["native"] + (["x86-64-v3"] if platform.machine() == "x86_64" else [])


@pytest.fixture(params=ARCHES)
def kernels(request):
    k = cpu_kernels.load(request.param)
    if k is None:
        pytest.skip(f"rollart's C kernels cannot be built for -march={request.param}: {cpu_kernels._failure[request.param]}")
    return k


def _case(q_lens, ctx, heads, kv_heads, head_dim, block_size, dtype, seed=0):
    return random_case(q_lens, ctx, heads, kv_heads, head_dim, block_size, dtype, seed, q_scale=2.0)


# decode at a block boundary (16, 17), a whole prompt, a chunk after a cached prefix, a 1-token prompt, a long decode
MIXED = ([1, 1, 9, 20, 1, 1], [16, 17, 9, 52, 1, 70])


@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 2, 32), (9, 3, 64), (4, 1, 64), (2, 2, 128), (6, 3, 48),
                                                     (16, 1, 64)],
                         ids=["gqa2-d32", "smollm2", "mqa", "mha-d128", "d48-off-width", "g16"])
@pytest.mark.parametrize("block_size", [16, 8])
def test_attention_matches_reference(kernels, heads, kv_heads, head_dim, block_size):
    args, ref = _case(*MIXED, heads, kv_heads, head_dim, block_size, torch.float32)
    torch.testing.assert_close(kernels.attention(*args), ref, atol=2e-5, rtol=0)


def test_bfloat16_and_long_prefill(kernels):
    args, ref = _case([1, 5, 150], [40, 21, 300], 9, 3, 64, 16, torch.bfloat16, seed=2)
    out = kernels.attention(*args)
    assert out.dtype is torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=0)


def test_threads_do_not_change_the_result(kernels):
    args, _ = _case(*MIXED, 9, 3, 64, 16, torch.float32, seed=3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernels.attention(*args)
        torch.set_num_threads(2)
        two = kernels.attention(*args)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_attention_refuses_what_it_cannot_read(kernels):
    args, _ = _case([1], [5], 4, 2, 32, 16, torch.float32)
    q, k, v, starts, ctx, bt = args
    with pytest.raises(ValueError, match="contiguous caches"):
        kernels.attention(q, k.half(), v.half(), starts, ctx, bt)
    with pytest.raises(ValueError, match="int64"):
        kernels.attention(q, k, v, starts.int(), ctx, bt)


def test_sampler_inverts_the_cdf_as_torch_does_and_scores_raw_logits(kernels):
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(64, 5000, generator=g) * 3
    temperature = torch.tensor([1.0] * 40 + [0.7] * 16 + [0.0] * 8)
    uniform = torch.rand(64, dtype=torch.float64, generator=g)
    tokens, logprobs = kernels.sample_rows(logits, temperature, uniform)
    probs = torch.softmax(logits[:56] / temperature[:56, None], -1).double()
    cdf = probs.cumsum(-1)
    ref = torch.searchsorted(cdf, (uniform[:56] * cdf[:, -1])[:, None], right=True)[:, 0]
    assert (tokens[:56] == ref).float().mean() >= 0.95        # a uniform within rounding of a boundary may differ
    assert (tokens[:56] - ref).abs().max() <= 1
    assert torch.equal(tokens[56:], logits[56:].argmax(-1))    # temperature 0: greedy, the first largest
    torch.testing.assert_close(logprobs, torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0],
                               atol=1e-5, rtol=0)


def test_sampler_never_draws_a_token_of_zero_probability(kernels):
    logits = torch.full((200, 64), -1e4)
    logits[:, 10], logits[:, 20] = 0.0, 0.5
    uniform = torch.linspace(0, 1 - 1e-12, 200, dtype=torch.float64)
    tokens, _ = kernels.sample_rows(logits, torch.ones(200), uniform)
    assert set(tokens.tolist()) == {10, 20}


def test_engine_sampler_with_kernels_draws_the_torch_path_tokens(kernels):
    """The engine's sampler: the same generator numbers give the same tokens with or without the kernels; top-p
    rows are drawn by torch either way."""
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(5)) * 2
    params = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.0), SamplingParams(temperature=0.8),
              SamplingParams(temperature=1.0, top_p=0.9), SamplingParams(temperature=1.0, top_k=5),
              SamplingParams(temperature=1.3)]
    gens = lambda: [torch.Generator().manual_seed(10 + i) for i in range(6)]  # noqa: E731
    ours = sample(logits, params, gens(), kernels)
    ref = sample(logits, params, gens())
    assert ours[0] == ref[0]
    torch.testing.assert_close(torch.tensor(ours[1]), torch.tensor(ref[1]), atol=1e-5, rtol=0)


def test_a_failed_build_names_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "/bin/false")
    with pytest.raises(RuntimeError, match="could not build cpu_kernels.c"):
        cpu_kernels.build("native")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(RuntimeError, match="cannot run"):
        cpu_kernels.build("native")
    assert not list((tmp_path / "rollart" / "kernels").glob("*.so"))  # nothing half-written is left to load


def test_a_build_is_reused(tmp_path, monkeypatch):
    if cpu_kernels.unavailable():
        pytest.skip(cpu_kernels.unavailable())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = cpu_kernels.build("native")
    stamp = first.stat().st_mtime_ns
    assert cpu_kernels.build("native") == first and first.stat().st_mtime_ns == stamp


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_and_mul_matches_torch(kernels, dtype):
    from rollart.models.paged_ops import silu_and_mul
    x = (torch.randn(37, 2 * 200, generator=torch.Generator().manual_seed(6)) * 6).to(dtype)  # large |g| too
    out = kernels.silu_and_mul(x)
    assert out.dtype is dtype and out.shape == (37, 200)
    tol = 1e-5 if dtype is torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), silu_and_mul(x.float()), atol=tol, rtol=tol)
    strided = torch.randn(5, 8, dtype=torch.float32)[:, ::2]                # rows it cannot read: torch serves
    torch.testing.assert_close(kernels.silu_and_mul(strided), silu_and_mul(strided))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_and_cache_matches_torch(kernels, dtype):
    from rollart.models.paged_ops import rope_and_cache
    from rollart.models.rope import Rotary
    g = torch.Generator().manual_seed(7)
    N, H, Hkv, D, slots = 11, 4, 2, 32, 40
    rotary = Rotary(1.0 / (10000 ** (torch.arange(0, D, 2).float() / D)), 64)
    cos, sin = rotary.tables(64, torch.device("cpu"), dtype)
    positions = torch.randint(0, 64, (N,), generator=g)
    cos, sin = cos[positions][:, None], sin[positions][:, None]            # (N, 1, D), as forward_paged makes them
    qkv = torch.randn(N, H + 2 * Hkv, D, generator=g).to(dtype)
    slot_mapping = torch.randperm(slots, generator=g)[:N]
    results = []
    for fn in (rope_and_cache, kernels.rope_and_cache):
        kv = torch.zeros(2, slots // 4, 4, Hkv, D, dtype=dtype)
        q = fn(qkv.clone(), H, Hkv, rotary, cos, sin, kv, slot_mapping)
        results.append((q.float(), kv.float()))
    tol = 1e-6 if dtype is torch.float32 else 2e-2
    torch.testing.assert_close(results[1][0], results[0][0], atol=tol, rtol=0)
    torch.testing.assert_close(results[1][1], results[0][1], atol=tol, rtol=0)
    assert results[1][1].flatten(1, 2)[:, slot_mapping].abs().sum() > 0      # k and v landed in their slots


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(1, 5, 3), (3, 33, 7), (16, 960, 576), (9, 100, 577), (70, 130, 64)],
                         ids=["tiny", "odd", "smollm2-qkv", "odd-k", "rows-past-a-tile"])
def test_linear_on_packed_weights_matches_f_linear(kernels, dtype, m, n, k):
    """Every shape: partial panels (n off the panel width), odd depths (bf16 pairs pad k), rows past a tile."""
    g = torch.Generator().manual_seed(m * n + k)
    w, x, b = (torch.randn(*s, generator=g).to(dtype) for s in ((n, k), (m, k), (n,)))
    ref = torch.nn.functional.linear(x.float(), w.float(), b.float())
    out = kernels.linear(x, kernels.pack_linear(w), n, b)
    assert out.dtype is dtype and out.shape == (m, n)
    tol = 1e-5 if dtype is torch.float32 else 8e-3  # bf16: the output's own rounding
    torch.testing.assert_close(out.float(), ref, atol=tol * ref.abs().max().item(), rtol=0)
    torch.testing.assert_close(kernels.linear(x, kernels.pack_linear(w), n).float(), ref - b.float(),
                               atol=tol * ref.abs().max().item(), rtol=0)
    wide = torch.randn(m, k + 5, generator=g).to(dtype)  # rows further apart than k (a view of a wider tensor)
    wide[:, :k] = x
    torch.testing.assert_close(kernels.linear(wide[:, :k], kernels.pack_linear(w), n, b).float(), ref,
                               atol=tol * ref.abs().max().item(), rtol=0)


def test_linear_refuses_an_input_its_packed_weight_does_not_fit(kernels):
    packed = kernels.pack_linear(torch.randn(40, 24))
    with pytest.raises(ValueError, match="does not fit"):
        kernels.linear(torch.randn(5, 23), packed, 40)
    with pytest.raises(ValueError, match="does not fit"):
        kernels.linear(torch.randn(5, 24).bfloat16(), packed, 40)


def test_engine_linears_serve_packed_weights_and_pass_others_to_f_linear(kernels):
    w, other = torch.randn(40, 24), torch.randn(40, 24)
    lin = kernels.linears()
    lin.pack([w])
    x = torch.randn(5, 24)
    torch.testing.assert_close(lin(x, w), x @ w.T, atol=1e-5, rtol=0)
    torch.testing.assert_close(lin(x, other), x @ other.T)  # never packed: F.linear
    with torch.no_grad():
        w.mul_(2.0)  # changed in place: stale until packed again, as the engine repacks after every update
    lin.pack([w])
    torch.testing.assert_close(lin(x, w), x @ w.T, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_engine_linears_send_a_prefill_s_rows_to_torch_s_gemm_where_it_has_the_dtype(kernels, dtype, monkeypatch):
    """Below GEMM_ROWS rows (a decode step) the C kernel multiplies; from GEMM_ROWS on, torch's GEMM in float32, and in
    bfloat16 only where the CPU has native bf16 (else the C kernel still); both paths give x @ W^T."""
    w = torch.randn(40, 24).to(dtype)
    lin = kernels.linears()
    lin.pack([w])
    in_c = []
    real = kernels.linear
    monkeypatch.setattr(kernels, "linear", lambda x, *a: in_c.append(x.shape[0]) or real(x, *a))
    few, many = torch.randn(8, 24).to(dtype), torch.randn(cpu_kernels.GEMM_ROWS, 24).to(dtype)
    for x in (few, many):
        torch.testing.assert_close(lin(x, w).float(), x.float() @ w.float().T, atol=0.05 if dtype == torch.bfloat16
                                   else 1e-4, rtol=0.02 if dtype == torch.bfloat16 else 1e-5)
    expected = [8] if cpu_kernels.gemm_rows_go_to_torch(dtype) else [8, cpu_kernels.GEMM_ROWS]
    assert in_c == expected
    assert cpu_kernels.gemm_rows_go_to_torch(torch.float32)
