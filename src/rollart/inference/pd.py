"""Prefill/decode (PD) disaggregation for LLMProxy (RollArt §6.3, Table 5).

The split alone, over a ``run(phase, request)`` callable the proxy supplies (so this module knows nothing of
routing or of the proxy): each phase is one ``GenerateRequest``.

A request's prefill runs on a worker of ``pd_prefill_class`` (compute-optimized, e.g. H800) and its
decode on a worker of ``pd_decode_class`` (bandwidth-optimized, e.g. H20):

1. the prefill worker computes the prompt's K/V, samples the first token (``max_tokens=1``) and hands the
   K/V back with its result (``GenerateRequest.export_kv``): one contiguous (L, 2, T, Hkv, D) tensor that the
   actor runtime sends as a zero-copy frame, or a CUDA IPC handle where the cache lives on a GPU
   (``rollart.engine.kv_transfer``);
2. the decode worker receives ``prompt + [first token]`` with that K/V (``GenerateRequest.kv``), installs it
   into its own paged cache at admission and decodes from the first token on: no prompt token is computed
   twice. The proxy counts what the decode side still computed in ``counters['pd_reprefill_tokens']``
   (0 unless the K/V could not be used: computed under older weights, or an IPC handle from another node)
   and the tokens handed over in ``counters['pd_kv_tokens']``.

Greedy output is identical to colocated generation (the same K/V, the same model). With sampling, the first
token comes from the prefill worker's sampler and the rest from the decode worker's; a seeded request stays
reproducible but is not token-identical to the colocated run.
"""
from __future__ import annotations

import dataclasses
from typing import Awaitable, Callable

from rollart.types import GenerateRequest, GenerationResult

RunPhase = Callable[[str, GenerateRequest], Awaitable[GenerationResult]]
"""``run(phase, request)``: one request on a worker of the phase's class ('p' prefill, 'd' decode), asking for
the prompt's K/V (``request.export_kv``) or bringing it (``request.kv``)."""


@dataclasses.dataclass
class PDStats:
    """What one disaggregated generation moved and recomputed."""
    kv_tokens: int = 0
    """Prompt tokens whose K/V the decode worker received."""
    kv_bytes: int = 0
    reprefill_tokens: int = 0
    """Prompt tokens the decode worker computed anyway (beyond the first generated token it decodes)."""


async def generate_disaggregated(run: RunPhase, request: GenerateRequest,
                                 transport: str = "auto") -> tuple[GenerationResult, PDStats]:
    """One generation split into a prefill and a decode request; returns the joined result and what moved."""
    prompt, params = request.prompt_token_ids, request.sampling
    first = await run("p", dataclasses.replace(request, sampling=dataclasses.replace(params, max_tokens=1),
                                               export_kv=transport))
    kv, first.kv = first.kv, None
    stats = PDStats()
    if first.finish_reason != "length" or params.max_tokens == 1:
        first.num_prompt_tokens = len(prompt)
        return first, stats  # stopped on its first token, or aborted
    rest = await run("d", dataclasses.replace(request, prompt_token_ids=prompt + first.token_ids, kv=kv,
                                              sampling=dataclasses.replace(params, max_tokens=params.max_tokens - 1)))
    if kv is not None:
        stats.kv_tokens, stats.kv_bytes = kv.num_tokens, kv.nbytes
    stats.reprefill_tokens = max(0, rest.num_prompt_tokens - 1 - rest.num_cached_tokens)
    joined = GenerationResult(
        token_ids=first.token_ids + rest.token_ids, logprobs=first.logprobs + rest.logprobs,
        versions=first.versions + rest.versions, finish_reason=rest.finish_reason,
        text=first.text + rest.text, num_prompt_tokens=len(prompt),
        num_cached_tokens=first.num_cached_tokens, worker=f"{first.worker}->{rest.worker}")
    return joined, stats
