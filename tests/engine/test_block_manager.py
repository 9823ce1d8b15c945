"""BlockManager (plain logic): prefix matching by chained block hashes, ref counts, LRU eviction, reset."""
import torch

from rollart.engine.block_manager import BlockManager
from rollart.types import SamplingParams
from rollart.engine.sequence import Sequence


def _seq(tokens, rid="r"):
    return Sequence(rid, tokens, SamplingParams(), torch.Generator())


def _compute_all(bm, seq):
    """Pretend the model computed every allocated token (what the engine does after a step)."""
    seq.num_computed_tokens = seq.num_tokens
    bm.commit_full_blocks(seq)


def test_shared_prefix_blocks_are_reference_counted():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = _seq(list(range(10)), "a")                      # blocks [0..3] [4..7] [8 9]
    assert bm.allocate(a, 100) == 10 and len(a.block_table) == 3
    _compute_all(bm, a)
    b = _seq(list(range(8)) + [50, 51, 52], "b")        # shares two full blocks
    assert bm.allocate(b, 100) == 3
    assert b.num_computed_tokens == 8 and b.block_table[:2] == a.block_table[:2]
    assert [bm.blocks[i].ref_count for i in a.block_table] == [2, 2, 1]
    bm.free_seq(a)
    assert bm.num_free_blocks == 8 - 3                  # b still holds the shared two + its own
    bm.free_seq(b)
    assert bm.num_free_blocks == 8


def test_match_requires_same_tokens_in_every_earlier_block():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = _seq(list(range(12)))
    bm.allocate(a, 100)
    _compute_all(bm, a)
    bm.free_seq(a)
    assert len(bm.match_prefix(_seq(list(range(12)) + [99]))) == 3
    assert len(bm.match_prefix(_seq([7] + list(range(1, 12)) + [99]))) == 0   # first block differs: nothing
    assert len(bm.match_prefix(_seq(list(range(12))))) == 2                    # the last token is always computed


def test_lru_evicts_least_recently_freed_and_tail_first():
    bm = BlockManager(num_blocks=4, block_size=2)
    a = _seq([1, 2, 3, 4, 5])                           # 3 blocks, two of them full
    bm.allocate(a, 100)
    _compute_all(bm, a)
    bm.free_seq(a)                                      # free order: never used, then a's tail ... head
    filler = _seq([9, 9, 9])                            # takes 2 blocks: the never-used one, then a's tail
    bm.allocate(filler, 100)
    assert len(bm.match_prefix(_seq([1, 2, 3, 4, 5]))) == 2     # a's two full blocks survived
    assert bm.evictions == 0                            # a's tail was partial: nothing cached was lost
    bm.allocate(_seq([8, 8], "x"), 100)                 # next eviction: a's second block
    assert len(bm.match_prefix(_seq([1, 2, 3, 4, 5]))) == 1
    assert bm.evictions == 1


def test_reset_prefix_cache_forgets_everything():
    bm = BlockManager(num_blocks=4, block_size=2)
    a = _seq([1, 2, 3, 4, 5])
    bm.allocate(a, 100)
    _compute_all(bm, a)
    bm.reset_prefix_cache()
    assert bm.match_prefix(_seq([1, 2, 3, 4, 5])) == [] and not bm.hash_to_block


def test_allocate_refuses_without_side_effects_when_full():
    bm = BlockManager(num_blocks=2, block_size=4)
    big = _seq(list(range(20)))
    assert bm.allocate(big, 100) == 0 and big.block_table == [] and bm.num_free_blocks == 2
    assert bm.allocate(big, 8) == 8 and bm.num_free_blocks == 0   # a chunk that fits


def _cache(bm, tokens, rid="c"):
    seq = _seq(tokens, rid)
    bm.allocate(seq, 100)
    _compute_all(bm, seq)
    bm.free_seq(seq)


def test_namespaces_keep_their_prefixes_apart_and_across_switches():
    bm = BlockManager(num_blocks=8, block_size=2)
    bm.set_namespace("A")
    _cache(bm, [1, 2, 3, 4, 5])
    bm.set_namespace("B")
    assert bm.match_prefix(_seq([1, 2, 3, 4, 5])) == []     # same tokens, other weights: no match
    _cache(bm, [1, 2, 3, 4, 5])
    assert bm.cached_blocks() == {"A": 2, "B": 2}
    bm.set_namespace("A")
    assert len(bm.match_prefix(_seq([1, 2, 3, 4, 5]))) == 2  # A's blocks survived B's turn
    assert bm.drop_namespace("A") == 2
    assert bm.match_prefix(_seq([1, 2, 3, 4, 5])) == [] and bm.cached_blocks() == {"B": 2}
    bm.set_namespace("B")
    assert len(bm.match_prefix(_seq([1, 2, 3, 4, 5]))) == 2  # dropping A left B's alone


def test_namespaces_share_one_budget_evicted_lru():
    bm = BlockManager(num_blocks=4, block_size=2)
    bm.set_namespace("A")
    _cache(bm, [1, 2, 3, 4, 5], "a")                          # 3 blocks, 2 of them cached
    bm.set_namespace("B")
    big = _seq([7, 8, 9, 10, 11, 12, 13], "b")                # needs 4 blocks: A's cached ones are evicted
    assert bm.allocate(big, 100) == 7 and bm.evictions == 2
    bm.free_seq(big)
    bm.set_namespace("A")
    assert bm.match_prefix(_seq([1, 2, 3, 4, 5])) == []
