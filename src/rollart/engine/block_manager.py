"""BlockManager: the paged KV cache's free list, reference counts and prefix cache.

Blocks are ``block_size`` token slots. A block that is full and computed gets a chained hash
(hash of the previous block's hash and its own tokens) and is registered in ``hash_to_block``;
a later sequence with the same token prefix takes those blocks (``ref_count += 1``) instead of
recomputing them. Freed blocks keep their hash and sit in an LRU free list, so a finished
request's history stays reusable by its trajectory's next turn until the space is needed.

Namespaces let one cache serve several sets of weights (the jobs of a shared inference worker): the
chain of hashes starts from the current ``namespace``, each cached block remembers the namespace it was
computed in, and only blocks of the current namespace match. A namespace's blocks stay cached while
another is current (evicted LRU with the rest under pressure) and match again when it comes back;
``drop_namespace`` forgets them when their weights changed.
"""
from __future__ import annotations

from collections import OrderedDict

from rollart.engine.sequence import Sequence


def chain_hash(prev: int, tokens: tuple[int, ...]) -> int:
    return hash((prev, tokens))


def namespace_seed(namespace: str | None) -> int:
    """First link of the hash chain: 0 for the default namespace (None)."""
    return 0 if namespace is None else hash(("namespace", namespace))


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids", "namespace")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.token_ids: tuple[int, ...] = ()
        self.namespace: str | None = None


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        """Blocks with ref_count 0, least recently freed first (evicted first)."""
        self.hash_to_block: dict[int, int] = {}
        self.evictions = 0
        """Cached blocks whose content was dropped to make room (prefix-cache evictions)."""
        self.namespace: str | None = None
        """Whose weights the K/V computed now belongs to; only its cached blocks match."""
        self._seed = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _take_free(self) -> int:
        block_id, _ = self.free.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None and self.hash_to_block.get(block.hash) == block_id:
            del self.hash_to_block[block.hash]  # evict its cached content
            self.evictions += 1
        block.hash, block.token_ids, block.namespace, block.ref_count = None, (), None, 1
        return block_id

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks covering a prefix of seq's tokens; the last token is always left to compute."""
        if not self.enable_prefix_caching:
            return []
        hits, h, bs = [], self._seed, self.block_size
        for i in range((seq.num_tokens - 1) // bs):
            tokens = tuple(seq.token_ids[i * bs:(i + 1) * bs])
            h = chain_hash(h, tokens)
            block_id = self.hash_to_block.get(h)
            if block_id is None or self.blocks[block_id].token_ids != tokens \
                    or self.blocks[block_id].namespace != self.namespace:
                break
            hits.append(block_id)
        return hits

    def allocate(self, seq: Sequence, token_budget: int) -> int:
        """Give a sequence without blocks its prefix-cache hits (or, with imported K/V, blocks for those tokens)
        plus blocks for up to token_budget new tokens. Returns the number of new tokens to compute (0: not enough free blocks; nothing changed)."""
        assert not seq.block_table
        hits = [] if seq.imported_kv is not None else self.match_prefix(seq)
        num_cached = len(hits) * self.block_size
        if seq.imported_kv is not None:  # its K/V arrived with it (PD): fresh blocks, filled by the engine
            num_cached = seq.imported_kv_tokens
        num_new = min(seq.num_tokens - num_cached, token_budget)
        fresh = self.blocks_needed(num_cached + num_new) - len(hits)
        hits_in_free = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        if fresh + hits_in_free > self.num_free_blocks:
            return 0
        h = 0
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free[block_id]
            block.ref_count += 1
            h = block.hash
            seq.block_hashes.append(h)
        seq.block_table = hits + [self._take_free() for _ in range(fresh)]
        seq.num_computed_tokens = num_cached
        return num_new

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Make room for num_new_tokens more tokens of a running sequence; False if the cache is full."""
        need = self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if need > self.num_free_blocks:
            return False
        seq.block_table.extend(self._take_free() for _ in range(need))
        return True

    def commit_full_blocks(self, seq: Sequence) -> None:
        """Register every block that became full and computed, so later requests can reuse it."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        for i in range(len(seq.block_hashes), seq.num_computed_tokens // bs):
            tokens = tuple(seq.token_ids[i * bs:(i + 1) * bs])
            h = chain_hash(seq.block_hashes[-1] if seq.block_hashes else self._seed, tokens)
            seq.block_hashes.append(h)
            block = self.blocks[seq.block_table[i]]
            if h not in self.hash_to_block:  # else an identical block is already cached; keep that one
                block.hash, block.token_ids, block.namespace = h, tokens, self.namespace
                self.hash_to_block[h] = block.block_id

    def free_seq(self, seq: Sequence) -> None:
        """Release a sequence's blocks; tail blocks go first in the LRU order (least useful alone)."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free[block_id] = None
        seq.block_table = []

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash of every namespace (their K/V came from weights that are no longer current)."""
        self.hash_to_block.clear()
        for block in self.blocks:
            block.hash, block.token_ids, block.namespace = None, (), None

    def set_namespace(self, namespace: str | None) -> None:
        """Make ``namespace`` current: its cached blocks match from now on, the others' wait (call it with no
        sequence holding blocks: a running sequence's hash chain belongs to the namespace it started in)."""
        self.namespace, self._seed = namespace, namespace_seed(namespace)

    def drop_namespace(self, namespace: str | None) -> int:
        """Forget the cached blocks of ``namespace`` (its weights changed); returns how many were dropped."""
        dropped = 0
        for block in self.blocks:
            if block.hash is not None and block.namespace == namespace:
                if self.hash_to_block.get(block.hash) == block.block_id:
                    del self.hash_to_block[block.hash]
                block.hash, block.token_ids, block.namespace = None, (), None
                dropped += 1
        return dropped

    def cached_blocks(self) -> dict[str | None, int]:
        """Namespace -> number of blocks holding a cached prefix of it."""
        out: dict[str | None, int] = {}
        for block in self.blocks:
            if block.hash is not None and self.hash_to_block.get(block.hash) == block.block_id:
                out[block.namespace] = out.get(block.namespace, 0) + 1
        return out
