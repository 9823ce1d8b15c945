"""A model-based reward built from a rollart model: a tiny byte-level :class:`rollart.models.transformer.CausalLM`
that scores an answer by its likelihood given the reference.

``score(model, text, reference)`` = exp(mean log-probability of the answer's bytes after the reference's),
in (0, 1]. ``judge_models(n)`` makes an ensemble of ``n`` such judges (different seeds and sizes); a run
scores with their mean (``reward.judges``). Each judge is deterministic given its seed, so a score does not
depend on which process or which restore of the weights computed it.
"""
from __future__ import annotations

from typing import Callable

import torch

from rollart.models.config import ModelConfig
from rollart.models.transformer import CausalLM

SEP = 0  # byte 0 separates reference and answer
MAX_BYTES = 256


def judge_config(i: int) -> ModelConfig:
    """Judge ``i`` of an ensemble: widths 128 / 192 / 256 in turn (different sizes, as a real ensemble has)."""
    hidden = 128 + 64 * (i % 3)
    return ModelConfig(vocab_size=256, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                       max_position_embeddings=2 * MAX_BYTES + 2)


def make_judge(i: int) -> Callable[[], CausalLM]:
    """A factory of judge ``i``: the module's structure, weights initialised from seed ``i``."""
    def make() -> CausalLM:
        model = CausalLM(judge_config(i))
        if not any(p.is_meta for p in model.parameters()):
            model.init_weights(torch.Generator().manual_seed(1000 + i), std=0.05)
        return model.eval()
    return make


def judge_models(n: int) -> dict[str, Callable[[], CausalLM]]:
    """``{"judge0": factory, ...}``: an ensemble of ``n`` judges."""
    return {f"judge{i}": make_judge(i) for i in range(n)}


@torch.no_grad()
def score(model: CausalLM, text: str, reference: str) -> float:
    """exp(mean log p(answer byte | reference, earlier answer bytes)) in (0, 1]."""
    ref = list(reference.encode()[:MAX_BYTES])
    ans = list(text.encode()[:MAX_BYTES]) or [SEP]
    ids = torch.tensor([ref + [SEP] + ans])                              # (1, T)
    logp = torch.log_softmax(model(ids)[0, :-1].float(), dim=-1)         # (T-1, V)
    targets = ids[0, 1:]
    picked = logp.gather(1, targets[:, None])[:, 0][len(ref):]           # the answer's bytes only
    return float(torch.exp(picked.mean()))
