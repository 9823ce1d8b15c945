"""Prefill/decode (PD) disaggregation for LLMProxy (RollArt §6.3, Table 5).

A request's prefill runs on a worker of ``pd_prefill_class`` (compute-optimized, e.g. H800) and its
decode on a worker of ``pd_decode_class`` (bandwidth-optimized, e.g. H20).

How the KV moves, on this CPU build: it does not - the decode worker **re-prefills**. The prefill
worker computes the prompt's KV and samples the first token (``max_tokens=1``); the decode worker then
receives ``prompt + [first token]`` and generates the rest, rebuilding the KV itself (its prefix cache
serves whatever earlier turns of the same trajectory it already holds, since routing is sticky per
phase). On GPUs the KV blocks would be shipped instead (as in vLLM's KV connectors); here shipping them
would save exactly the re-prefill, whose size is counted in ``proxy.counters['pd_reprefill_tokens']``.
Cost: every turn pays its uncached prompt tokens twice (once per phase) plus one extra round trip.

Greedy output is identical to colocated generation (the same tokens are fed to the same model).
With sampling, the first token comes from the prefill worker's sampler and the rest from the decode
worker's; a seeded request stays reproducible but is not token-identical to the colocated run.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from rollart.engine.sampling import SamplingParams
from rollart.types import GenerationResult

if TYPE_CHECKING:
    from rollart.rollout.proxy import LLMProxy


async def generate_disaggregated(proxy: "LLMProxy", trajectory_id: str, seq: int, prompt: list[int],
                                 params: SamplingParams) -> GenerationResult:
    key = f"{trajectory_id}#{seq}"
    first_params = dataclasses.replace(params, max_tokens=1)
    first = await proxy.run_request(trajectory_id, key, prompt, first_params, proxy.cfg.pd_prefill_class,
                                    phase="p")
    if first.finish_reason != "length" or params.max_tokens == 1:
        first.num_prompt_tokens = len(prompt)
        return first  # stopped on its first token, or aborted
    rest_params = dataclasses.replace(params, max_tokens=params.max_tokens - 1)
    rest = await proxy.run_request(trajectory_id, key, prompt + first.token_ids, rest_params,
                                   proxy.cfg.pd_decode_class, phase="d")
    proxy.counters["pd_reprefill_tokens"] += rest.num_prompt_tokens - rest.num_cached_tokens
    return GenerationResult(
        token_ids=first.token_ids + rest.token_ids, logprobs=first.logprobs + rest.logprobs,
        versions=first.versions + rest.versions, finish_reason=rest.finish_reason,
        text=first.text + rest.text, num_prompt_tokens=len(prompt),
        num_cached_tokens=first.num_cached_tokens, worker=f"{first.worker}->{rest.worker}")
