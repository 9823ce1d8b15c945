"""Batched sampling on the device (Triton under its interpreter on the CPU): the right distribution, per-request
reproducibility independent of the batch, top-k / top-p as the per-request reference, raw-logit logprobs."""
import pytest
import torch

pytest.importorskip("triton", reason="the device sampler needs the triton package (pip install triton)")

from rollart.engine.device_sampler import (SamplingTensors, exponential_race, filter_top_k_top_p,  # noqa: E402
                                           sample_on_device, step_seed)
from rollart.types import SamplingParams  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_exponential_race_draws_softmax():
    V, S = 6, 200
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5, float("-inf")])
    tokens = exponential_race(logits.expand(S, V).contiguous().to(DEVICE),
                              torch.tensor([step_seed(3, i) for i in range(S)], device=DEVICE)).cpu()
    freq = torch.bincount(tokens, minlength=V).float() / S
    assert freq[5] == 0                                                     # masked: never drawn
    # 200 draws: each frequency within ~4.5 standard deviations of its probability
    p = logits.softmax(-1)
    assert ((freq - p).abs() <= 4.5 * (p * (1 - p) / S).sqrt() + 1e-6).all(), (freq, p)


def test_same_seed_same_token_whatever_the_batch():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 50, generator=g).to(DEVICE)
    seeds = torch.tensor([step_seed(s, 4) for s in (11, 12, 13, 14, 15)], device=DEVICE)
    batch = exponential_race(logits, seeds)
    alone = exponential_race(logits[3:4].contiguous(), seeds[3:4])
    assert batch[3] == alone[0]
    again = exponential_race(logits, seeds)
    assert torch.equal(batch, again)
    steps = torch.stack([exponential_race(logits[:1].contiguous(), torch.tensor([step_seed(11, i)], device=DEVICE))
                         for i in range(12)])
    assert len(set(steps.flatten().tolist())) > 1                          # the step changes the draw


def test_top_k_top_p_filter_matches_per_request_reference():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 40, generator=g)
    top_k, top_p = torch.tensor([5, 40, 3]), torch.tensor([2.0, 0.6, 0.5])
    got = filter_top_k_top_p(logits, top_k, top_p)
    for row, (k, p) in enumerate(zip(top_k.tolist(), top_p.tolist())):
        ref = logits[row].clone()
        if k < 40:
            ref = ref.masked_fill(ref < torch.topk(ref, k).values[-1], float("-inf"))
        if p < 1:
            s, order = torch.sort(ref, descending=True)
            probs = s.softmax(-1)
            ref = ref.index_fill(0, order[(probs.cumsum(-1) - probs) >= p], float("-inf"))
        assert torch.equal(torch.isinf(got[row]), torch.isinf(ref)), row
        assert torch.isfinite(got[row]).sum() >= 1


def test_sample_on_device_greedy_top_k_one_and_logprobs():
    g = torch.Generator().manual_seed(2)
    logits = (torch.randn(4, 64, generator=g) * 3).to(DEVICE)
    params = [SamplingParams(temperature=0), SamplingParams(temperature=1.5, top_k=1, seed=1),
              SamplingParams(temperature=1.0, seed=2), SamplingParams(temperature=0.7, top_p=0.9, seed=3)]
    st = SamplingTensors.build(params, [step_seed(i, 0) for i in range(4)], 64, DEVICE)
    assert st.needs_filter and not st.all_greedy
    out = sample_on_device(logits, st).cpu()                               # (S, 2): token, logprob
    tokens = out[:, 0].long()
    argmax = logits.argmax(-1).cpu()
    assert tokens[0] == argmax[0] and tokens[1] == argmax[1]
    ref_lp = torch.log_softmax(logits.float().cpu(), -1).gather(1, tokens[:, None])[:, 0]
    torch.testing.assert_close(out[:, 1].float(), ref_lp, atol=1e-5, rtol=0)


def test_rows_split_into_chunks_find_a_peak_anywhere():
    """A vocabulary wider than one chunk (8192 columns): the winning chunk's token is returned."""
    for peak in (5, 9000, 19999):
        logits = torch.full((2, 20000), -30.0)
        logits[:, peak] = 30.0
        seeds = torch.tensor([step_seed(1, 0), step_seed(2, 0)], device=DEVICE)
        assert exponential_race(logits.to(DEVICE), seeds).tolist() == [peak, peak]
