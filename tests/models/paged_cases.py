"""Random paged-attention cases for the kernel tests: a cache whose blocks each sequence holds in random order, packed
queries, and the pure-torch reference's output (fp32)."""
import torch

from rollart.models.paged import build_group, paged_attention


def random_case(q_lens, ctx, heads, kv_heads, head_dim, block_size, dtype=torch.float32, seed=0, q_scale=1.0):
    """-> (q (N, H, D), k_cache, v_cache, query_start (S+1,), context_lens (S,), block_tables (S, B)), reference."""
    g = torch.Generator().manual_seed(seed)
    tables, used = [], 0
    for c in ctx:
        n = -(-c // block_size)
        tables.append(list(range(used, used + n)))
        used += n
    perm = torch.randperm(used + 3, generator=g).tolist()
    tables = [[perm[b] for b in t] for t in tables]
    k = torch.randn(used + 3, block_size, kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(used + 3, block_size, kv_heads, head_dim, generator=g).to(dtype)
    q = (torch.randn(sum(q_lens), heads, head_dim, generator=g) * q_scale).to(dtype)
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    width = max(map(len, tables))
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables])
    ref = paged_attention(q.float(), k.float(), v.float(),
                          [build_group(torch.tensor(starts[:-1]), torch.tensor(q_lens), torch.tensor(ctx), bt, block_size)])
    return (q, k, v, torch.tensor(starts), torch.tensor(ctx), bt), ref
