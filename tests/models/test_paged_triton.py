"""The Triton paged-attention kernel (run by Triton's interpreter on the CPU) equals the pure-torch reference:
GQA, keys across block boundaries, mixed prefill / decode / chunked-with-cached-prefix lengths, odd head dims."""
import pytest
import torch

pytest.importorskip("triton", reason="the kernel tests need the triton package (pip install triton)")

from rollart.models.paged import VarlenLayout  # noqa: E402
from rollart.models.paged_triton import paged_attention_triton  # noqa: E402

from paged_cases import random_case  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _case(q_lens, ctx, heads, kv_heads, head_dim, block_size, dtype=torch.float32, seed=0):
    (q, k, v, starts, ctx_t, bt), ref = random_case(q_lens, ctx, heads, kv_heads, head_dim, block_size, dtype, seed)
    layout = VarlenLayout(starts.to(DEVICE), ctx_t.to(DEVICE), bt.to(DEVICE), max(q_lens))
    out = paged_attention_triton(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), layout.query_start, layout.context_lens,
                                 layout.block_tables, layout.max_query_len)
    return out.float().cpu(), ref


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 1), (2, 2)], ids=["gqa2", "mqa", "mha"])
def test_mixed_prefill_and_decode_match_reference(heads, kv_heads):
    # decode at a block boundary (16, 17), a whole prompt, a chunk after a cached prefix, a 1-token prompt
    q_lens, ctx = [1, 1, 9, 20, 1], [16, 17, 9, 52, 1]
    out, ref = _case(q_lens, ctx, heads, kv_heads, 32, block_size=16)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=0)


def test_small_blocks_long_context_and_odd_head_dim():
    """Block size 4 (a key tile spans many blocks), 130 keys (three tiles), head_dim 48 (padded to 64)."""
    out, ref = _case([1, 3], [130, 67], 4, 2, 48, block_size=4, seed=1)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=0)


def test_bfloat16():
    out, ref = _case([1, 5], [40, 21], 4, 2, 32, block_size=16, dtype=torch.bfloat16, seed=2)
    torch.testing.assert_close(out, ref, atol=3e-2, rtol=0)


def test_padding_row_with_no_context_gives_zeros():
    """A CUDA graph's padding rows (context length 0) read no key and write zeros, not NaN."""
    k = torch.randn(2, 16, 1, 32).to(DEVICE)
    query_start, context_lens, tables = (torch.tensor(t, device=DEVICE) for t in ([0, 1, 2], [3, 0], [[0], [1]]))
    out = paged_attention_triton(torch.randn(2, 2, 32).to(DEVICE), k, k, query_start, context_lens, tables, 1).cpu()
    assert torch.isfinite(out).all() and out[1].abs().max() == 0 and out[0].abs().max() > 0
