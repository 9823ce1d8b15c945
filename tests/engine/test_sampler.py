"""The CPU sampler's draw: tokens in proportion to their probabilities, never a token of probability 0, the same
tokens for the same seed, and top-k / top-p applied before it."""
import torch

from rollart.engine.sampler import _draw, sample
from rollart.types import SamplingParams


def test_draws_follow_the_probabilities_and_skip_impossible_tokens():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0])
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([_draw(probs, gen) for _ in range(20000)]), minlength=6)
    assert counts[[0, 2, 5]].sum() == 0  # zero probability, including the last token
    freq = counts.double() / counts.sum()
    assert torch.allclose(freq, probs.double(), atol=0.015), freq


def test_a_uniform_rounded_up_to_the_total_still_draws_a_possible_token(monkeypatch):
    probs = torch.tensor([0.25, 0.75, 0.0, 0.0])
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.tensor(1.0, dtype=torch.float64))
    assert _draw(probs, torch.Generator()) == 1


def test_same_seed_same_tokens_and_top_k_holds():
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(1))
    params = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_k=5),
              SamplingParams(temperature=1.0, top_p=0.5)]

    def run(seed):
        return sample(logits, params, [torch.Generator().manual_seed(seed + i) for i in range(3)])
    tokens, lps = run(7)
    assert (tokens, lps) == run(7)
    assert tokens[1] in logits[1].topk(5).indices.tolist()
    assert lps == torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()
