"""Sampling from the last-position logits of each sequence, plus the behaviour logprob of each token.

The logprob returned is ``log_softmax(logits)[token]`` of the raw logits — NOT of the temperature /
top-k / top-p modified distribution the token was drawn from. That is the quantity the trainer
recomputes with ``rollart.models`` (importance ratios compare like with like); document any change.
"""
from __future__ import annotations

import torch
from torch import Tensor

from rollart.types import SamplingParams


def _sample_one(logits: Tensor, sp: SamplingParams, generator: torch.Generator) -> int:
    """logits (V,) float32 -> one token drawn with temperature, top-k and top-p applied."""
    logits = logits / sp.temperature
    if sp.top_k != -1 and sp.top_k < logits.shape[0]:
        kth = torch.topk(logits, sp.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sp.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass strictly before it already reaches top_p (keeps at least one)
        drop = (probs.cumsum(-1) - probs) >= sp.top_p
        logits = logits.index_fill(0, order[drop], float("-inf"))
    return _draw(logits.softmax(-1), generator)


def _draw(probs: Tensor, generator: torch.Generator) -> int:
    """One index of ``probs`` (V,), drawn by inverting its CDF at one uniform number from ``generator``. On the
    CPU ``torch.multinomial`` draws V exponentials instead (~0.9 ms a row at V = 49k, 15 % of a decode step of
    SmolLM2-135M at batch 16); this is ~0.1 ms. A token of probability 0 is never drawn: the CDF does not rise
    at it."""
    cdf = probs.double().cumsum(0)
    x = _uniform(generator) * cdf[-1]
    i = int(torch.searchsorted(cdf, x, right=True))
    return i if i < probs.shape[0] else int(probs.nonzero().max())  # x rounded up to the total


def _uniform(generator: torch.Generator) -> Tensor:
    """The one uniform number in [0, 1) a draw takes from its request's generator."""
    return torch.rand((), dtype=torch.float64, generator=generator)


def _plain(sp: SamplingParams, vocab: int) -> bool:
    """Greedy, or temperature alone (no top-k or top-p cut)."""
    return sp.greedy or ((sp.top_k == -1 or sp.top_k >= vocab) and sp.top_p >= 1.0)


def sample(logits: Tensor, params: list[SamplingParams], generators: list[torch.Generator],
           kernels=None) -> tuple[list[int], list[float]]:
    """logits (S, V) -> (token per row, log_softmax(logits)[token] per row). With ``kernels`` (the loaded
    ``rollart.models.cpu_kernels.Kernels``) greedy and temperature-only rows are drawn in C, from the same uniform
    number of the same generator by the same CDF inversion; top-k / top-p rows are drawn here."""
    logits = logits.float()
    if kernels is not None:
        return _sample_with_kernels(logits, params, generators, kernels)
    logprobs = torch.log_softmax(logits, dim=-1)                             # (S, V)
    tokens = logits.argmax(-1).tolist()                                      # greedy rows are done
    for row, (sp, gen) in enumerate(zip(params, generators)):
        if not sp.greedy:
            tokens[row] = _sample_one(logits[row], sp, gen)
    token_lp = logprobs.gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()
    return tokens, token_lp


def _sample_with_kernels(logits: Tensor, params: list[SamplingParams], generators: list[torch.Generator],
                         kernels) -> tuple[list[int], list[float]]:
    vocab = logits.shape[1]
    plain = [_plain(sp, vocab) for sp in params]
    temperature = torch.tensor([sp.temperature if p and not sp.greedy else 0.0 for sp, p in zip(params, plain)])
    uniform = torch.tensor([float(_uniform(g)) if p and not sp.greedy else 0.0
                            for sp, g, p in zip(params, generators, plain)], dtype=torch.float64)
    tokens, logprobs = kernels.sample_rows(logits, temperature, uniform)
    tokens, logprobs = tokens.tolist(), logprobs.tolist()
    for row, (sp, gen, p) in enumerate(zip(params, generators, plain)):
        if not p:
            tokens[row] = _sample_one(logits[row], sp, gen)
            logprobs[row] = float(torch.log_softmax(logits[row], -1)[tokens[row]])
    return tokens, logprobs
