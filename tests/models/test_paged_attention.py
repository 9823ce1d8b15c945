"""The CPU reference attention over the paged cache: decode rows in bf16/fp16 take the grouped path, which
computes what torch's attention computes — GQA head mapping, masked keys ignored — as accurately as torch's own
bf16 kernel does."""
import pytest
import torch
import torch.nn.functional as F

from rollart.models.paged import build_group, decode_attention_grouped, paged_attention


def _inputs(S=8, H=9, Hkv=3, D=64, K=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(S, H, 1, D, generator=g) * 2
    k = torch.randn(S, Hkv, K, D, generator=g) * 2
    v = torch.randn(S, Hkv, K, D, generator=g)
    lens = torch.randint(1, K + 1, (S,), generator=g)
    mask = (torch.arange(K)[None, :] < lens[:, None])[:, None, None, :]     # (S, 1, 1, K)
    return q, k, v, mask


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_grouped_decode_attention_is_as_accurate_as_torchs_kernel(dtype):
    q, k, v, mask = _inputs()
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
    ours = decode_attention_grouped(q, k, v, mask)
    torchs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert ours.dtype == dtype and ours.shape == q.shape
    err, torch_err = (ours.float() - exact).abs(), (torchs.float() - exact).abs()
    assert err.max() <= 2 * torch_err.max() and err.mean() <= 2 * torch_err.mean(), (err.max(), torch_err.max())


def test_query_heads_share_kv_heads_in_order_and_masked_keys_are_ignored():
    q, k, v, mask = _inputs(S=4, H=6, Hkv=2, D=16, K=20, seed=1)
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    out = decode_attention_grouped(q, k, v, mask)
    k2, v2 = k.clone(), v.clone()
    k2.masked_fill_(~mask.transpose(-1, -2), 1e4)      # keys and values past each context: garbage
    v2.masked_fill_(~mask.transpose(-1, -2), -1e4)
    assert torch.equal(decode_attention_grouped(q, k2, v2, mask), out)
    # query head h reads kv head h // (H / Hkv), as enable_gqa's repeat_interleave does
    per_head = torch.cat([F.scaled_dot_product_attention(q[:, h:h + 1].float(), k[:, h // 3:h // 3 + 1].float(),
                                                         v[:, h // 3:h // 3 + 1].float(), attn_mask=mask)
                          for h in range(6)], dim=1)
    torch.testing.assert_close(out.float(), per_head, atol=3e-2, rtol=0)


def test_paged_bf16_decode_takes_the_grouped_path_and_matches_fp32():
    """Two decoding sequences over a scattered paged cache: the bf16 result equals the fp32 one within bf16
    rounding, and it is the grouped path's (not torch's kernel's) result."""
    g = torch.Generator().manual_seed(2)
    block, heads, kv_heads, dim = 4, 4, 2, 32
    k_cache = torch.randn(12, block, kv_heads, dim, generator=g)
    v_cache = torch.randn(12, block, kv_heads, dim, generator=g)
    q = torch.randn(2, heads, dim, generator=g)
    tables = torch.tensor([[7, 2, 9], [4, 11, 0]])
    group = build_group(torch.tensor([0, 1]), torch.tensor([1, 1]), torch.tensor([10, 7]), tables, block)
    fp32 = paged_attention(q, k_cache, v_cache, [group])
    bf16 = paged_attention(q.bfloat16(), k_cache.bfloat16(), v_cache.bfloat16(), [group])
    torch.testing.assert_close(bf16.float(), fp32, atol=3e-2, rtol=0)
    kg = k_cache.bfloat16().index_select(0, tables.reshape(-1)).view(2, -1, kv_heads, dim).transpose(1, 2)
    vg = v_cache.bfloat16().index_select(0, tables.reshape(-1)).view(2, -1, kv_heads, dim).transpose(1, 2)
    grouped = decode_attention_grouped(q.bfloat16()[:, :, None], kg, vg, group.mask)
    assert torch.equal(bf16, grouped[:, :, 0])
