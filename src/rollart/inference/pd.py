"""Prefill/decode (PD) disaggregation for LLMProxy (RollArt §6.3, Table 5).

The split alone, over a ``run(prompt, params, phase)`` callable the proxy supplies (so this module
knows nothing of routing or of the proxy).

A request's prefill runs on a worker of ``pd_prefill_class`` (compute-optimized, e.g. H800) and its
decode on a worker of ``pd_decode_class`` (bandwidth-optimized, e.g. H20).

How the KV moves, on this CPU build: it does not - the decode worker **re-prefills**. The prefill
worker computes the prompt's KV and samples the first token (``max_tokens=1``); the decode worker then
receives ``prompt + [first token]`` and generates the rest, rebuilding the KV itself (its prefix cache
serves whatever earlier turns of the same trajectory it already holds, since routing is sticky per
phase). On GPUs the KV blocks would be shipped instead (as in vLLM's KV connectors); here shipping them
would save exactly the re-prefill, whose size the proxy counts in ``counters['pd_reprefill_tokens']``.
Cost: every turn pays its uncached prompt tokens twice (once per phase) plus one extra round trip.

Greedy output is identical to colocated generation (the same tokens are fed to the same model).
With sampling, the first token comes from the prefill worker's sampler and the rest from the decode
worker's; a seeded request stays reproducible but is not token-identical to the colocated run.
"""
from __future__ import annotations

import dataclasses
from typing import Awaitable, Callable

from rollart.types import GenerationResult, SamplingParams

RunPhase = Callable[[list[int], SamplingParams, str], Awaitable[GenerationResult]]
"""``run(prompt, params, phase)``: one request on a worker of the phase's class ('p' prefill, 'd' decode)."""


async def generate_disaggregated(run: RunPhase, prompt: list[int],
                                 params: SamplingParams) -> tuple[GenerationResult, int]:
    """One generation split into a prefill and a decode request; returns the joined result and the
    number of prompt tokens the decode worker re-prefilled (0 when generation ended on the first token)."""
    first = await run(prompt, dataclasses.replace(params, max_tokens=1), "p")
    if first.finish_reason != "length" or params.max_tokens == 1:
        first.num_prompt_tokens = len(prompt)
        return first, 0  # stopped on its first token, or aborted
    rest = await run(prompt + first.token_ids, dataclasses.replace(params, max_tokens=params.max_tokens - 1), "d")
    joined = GenerationResult(
        token_ids=first.token_ids + rest.token_ids, logprobs=first.logprobs + rest.logprobs,
        versions=first.versions + rest.versions, finish_reason=rest.finish_reason,
        text=first.text + rest.text, num_prompt_tokens=len(prompt),
        num_cached_tokens=first.num_cached_tokens, worker=f"{first.worker}->{rest.worker}")
    return joined, rest.num_prompt_tokens - rest.num_cached_tokens
