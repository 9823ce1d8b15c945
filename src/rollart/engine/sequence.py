"""Sequence: one request's tokens and its place in the KV cache and in the scheduler."""
from __future__ import annotations

from enum import Enum, auto

import torch

from rollart.types import SamplingParams


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    def __init__(self, request_id: str, prompt_token_ids: list[int], sampling: SamplingParams,
                 generator: torch.Generator, seed: int = 0):
        self.request_id = request_id
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.sampling = sampling
        self.generator = generator
        self.seed = seed
        """The request's sampling seed (the kernel path draws from it on the device; ``generator`` on the CPU)."""
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        """Tokens whose K/V sit in this sequence's blocks."""
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []
        """Chained hash of each full, computed block (for the prefix cache)."""
        self.num_cached_tokens: int | None = None
        """Prompt tokens served from the prefix cache on first admission (None until admitted)."""
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.finish_reason: str | None = None
        self.stop_checker = None
        """Incremental detokenizer, created only when the request has stop strings."""
        self.imported_kv = None
        """PD decode side: (L, 2, blocks, block_size, Hkv, D) K/V of the first ``imported_kv_tokens`` tokens,
        installed at admission instead of a prefill (then dropped: a preempted sequence recomputes)."""
        self.imported_kv_tokens = 0
        self.export_kv = ""
        """PD prefill side: how to hand the prompt's K/V back when it finishes ('' = not at all)."""

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    def reset_computed(self) -> None:
        """Forget all K/V (after preemption or a weight update): the tokens stay, they will be recomputed."""
        self.num_computed_tokens = 0
        self.block_table = []
        self.block_hashes = []
        self.imported_kv = None
        self.status = SequenceStatus.WAITING
