"""Scheduler: continuous batching under a token budget, preemption by recompute when the cache is full.

Each step: (1) every running sequence gets its next chunk — one token when decoding, the rest of its
prefill otherwise — oldest first; when a block cannot be found the newest running sequence is
preempted (blocks freed, tokens kept, recomputed later, likely from the prefix cache). (2) If nothing
was preempted, waiting sequences are admitted FIFO with their prefix-cache hits while the token budget,
``max_num_seqs`` and free blocks allow.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rollart.engine.block_manager import BlockManager
from rollart.engine.sequence import Sequence, SequenceStatus


@dataclass
class SchedulerStats:
    preemptions: int = 0
    """Sequences evicted from the running batch because the KV cache was full."""
    prefix_hit_tokens: int = 0
    """Tokens whose K/V came from the prefix cache at admission (incl. re-admissions)."""
    computed_prompt_tokens: int = 0
    """Tokens prefilled (computed, not taken from the cache), incl. recomputation."""
    imported_kv_tokens: int = 0
    """Tokens whose K/V arrived with the request (PD decode side) and were installed, not computed."""


@dataclass
class ScheduledBatch:
    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seqs)


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int):
        self.bm = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = SchedulerStats()

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def preempt(self, seq: Sequence) -> None:
        self.bm.free_seq(seq)
        seq.reset_computed()
        self.waiting.appendleft(seq)

    def schedule(self) -> ScheduledBatch:
        batch, budget, preempted = ScheduledBatch(), self.max_num_batched_tokens, False
        # 1) running sequences: decode tokens and unfinished prefill chunks
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            while not self.bm.append_slots(seq, n):
                victim = self.running.pop()
                self.preempt(victim)
                self.stats.preemptions += 1
                preempted = True
                if victim is seq:
                    break
            else:
                batch.seqs.append(seq)
                batch.num_new_tokens.append(n)
                budget -= n
                i += 1
        # 2) admit waiting sequences (not while we are short of blocks)
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            n = self.bm.allocate(seq, budget)
            if n == 0:
                break
            self.waiting.popleft()
            if seq.num_cached_tokens is None:
                seq.num_cached_tokens = seq.num_computed_tokens
            if seq.imported_kv is not None:
                self.stats.imported_kv_tokens += seq.num_computed_tokens
            else:
                self.stats.prefix_hit_tokens += seq.num_computed_tokens
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            batch.seqs.append(seq)
            batch.num_new_tokens.append(n)
            budget -= n
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            if seq.num_computed_tokens < seq.num_tokens - 1:
                self.stats.computed_prompt_tokens += n
        return batch

    def finish(self, seq: Sequence, reason: str) -> None:
        """Take a sequence out of the scheduler (finished or aborted) and release its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.bm.free_seq(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason

    def reset_all(self, reset_prefix_cache: bool = True) -> int:
        """Drop every running sequence's K/V and (unless told not to) the prefix cache: the weights changed.
        Returns the tokens to recompute."""
        tokens = 0
        for seq in reversed(self.running):
            tokens += seq.num_computed_tokens
            self.preempt(seq)
        self.running.clear()
        for seq in self.waiting:
            seq.imported_kv = None  # K/V from the old weights: computed under the new ones instead
        if reset_prefix_cache:
            self.bm.reset_prefix_cache()
        return tokens
