"""Train/inference mismatch: how far the trainer's log-probs are from the engine's on the *same* weights.

``losses/approx_kl`` and ``losses/is_weight`` compare the trainer's policy with the behaviour policy that
sampled each token, which in asynchronous training is usually an older version: they mix staleness with any
numerical difference between the inference engine and the trainer (kernels, dtype, batching). These
metrics keep only the tokens sampled by the version the trainer holds when the step starts (staleness 0), so
whatever difference remains is the mismatch alone:

- ``mismatch/logprob_abs_diff``: mean |log pi_train(token) - log pi_infer(token)|;
- ``mismatch/kl``: the k3 estimate of KL(pi_infer || pi_train) from the sampled tokens,
  mean of (r - 1) - log r with r = pi_train / pi_infer (>= 0 per token, unbiased for samples of pi_infer);
- ``mismatch/tokens`` and ``mismatch/token_frac``: how many loss tokens were fresh (the others are left out).

The two means are logged only when some token was fresh.
"""
from __future__ import annotations

import torch


def mismatch_sums(train_logp: torch.Tensor, infer_logp: torch.Tensor, mask: torch.Tensor, versions: torch.Tensor,
                  version: int) -> torch.Tensor:
    """(3,) float64: sum |Δ logprob|, sum k3 KL and the count over loss tokens sampled by ``version``.
    Every argument but ``version`` is (B, T)."""
    fresh = (mask > 0) & (versions == version)
    delta = (train_logp.detach().float() - infer_logp.float())[fresh]
    kl = torch.expm1(delta) - delta  # (r - 1) - log r, r = exp(delta)
    return torch.stack([delta.abs().sum(), kl.sum(), fresh.sum()]).to(torch.float64).cpu()


def mismatch_metrics(sums: torch.Tensor, loss_tokens: float) -> dict[str, float]:
    """``mismatch/`` scalars from ``mismatch_sums`` (added over micro-batches and ranks)."""
    abs_sum, kl_sum, tokens = sums.tolist()
    out = {"mismatch/tokens": tokens, "mismatch/token_frac": tokens / max(loss_tokens, 1.0)}
    if tokens:
        out.update({"mismatch/logprob_abs_diff": abs_sum / tokens, "mismatch/kl": kl_sum / tokens})
    return out
