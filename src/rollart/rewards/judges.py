"""Model-based rewards: language models judge an answer by how likely they find it, given the reference.

``reward.judges`` names HF-format model folders (SmolLM2-135M-Instruct from ``python -m
rollart.tools.get_smollm2``, a Qwen or Llama checkpoint, a run's own saved model); each is loaded as a rollart
:class:`rollart.models.CausalLM` with its tokenizer. A judge scores an answer as
``exp(mean log p(answer tokens | "Reference answer: {reference}\\nAnswer: "))``, in (0, 1]: the higher the more
the judge expects that answer after that reference. A run adds ``reward.judge_weight`` x the judges' mean score
to each trajectory's reward (``rollart.rewards.scoring.with_judges``); with ``actions.enabled`` the judges are
GPU services of the action scheduler, restored from disk and evicted within ``actions.service_memory_mb``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from rollart.models import CausalLM, ModelConfig, load_state_dict, load_tokenizer, load_weights

MAX_TOKENS = 256
"""Tokens of the reference and of the answer a judge reads (each is cut to this many)."""


def judge_name(i: int, folder: str) -> str:
    return f"judge{i}-{Path(folder).name}"


def judge_factories(folders: tuple[str, ...] | list[str]) -> dict[str, Callable[[], CausalLM]]:
    """``{name: factory}`` per judge folder: the factory builds the model (its weights loaded from the folder
    unless built on the meta device, as the service manager builds the structure it restores into)."""
    def factory(folder: str) -> Callable[[], CausalLM]:
        def make() -> CausalLM:
            model = CausalLM(ModelConfig.from_pretrained(folder))
            if not any(p.is_meta for p in model.parameters()):
                load_weights(model, load_state_dict(folder).items())
            return model.eval()
        return make
    return {judge_name(i, f): factory(f) for i, f in enumerate(folders)}


def judge_tokenizers(folders: tuple[str, ...] | list[str]) -> dict[str, Any]:
    return {judge_name(i, f): load_tokenizer(f) for i, f in enumerate(folders)}


@torch.no_grad()
def score(model: CausalLM, tokenizer: Any, text: str, reference: str) -> float:
    """exp(mean log p(answer token | prompt with the reference, earlier answer tokens)) in (0, 1]."""
    prompt = tokenizer.encode(f"Reference answer: {reference}\nAnswer: ", add_special_tokens=False)[-MAX_TOKENS:]
    answer = tokenizer.encode(text, add_special_tokens=False)[:MAX_TOKENS] or [tokenizer.eos_token_id or 0]
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + answer], device=device)                    # (1, T)
    logp = torch.log_softmax(model(ids)[0, :-1].float(), dim=-1)            # (T-1, V)
    picked = logp.gather(1, ids[0, 1:, None])[:, 0][len(prompt) - 1:]       # the answer's tokens only
    return float(torch.exp(picked.mean()))
