"""Helpers shared by the engine tests: random prompts and a plain full-recompute greedy reference."""
import torch


def random_prompts(lengths, vocab=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


@torch.no_grad()
def greedy_reference(model, prompt, n, switch_at=None, model_after=None):
    """Full recompute of the whole context for every token; optionally switch models after switch_at tokens."""
    ids, lps = list(prompt), []
    for i in range(n):
        m = model_after if switch_at is not None and i >= switch_at else model
        logp = torch.log_softmax(m(torch.tensor([ids]))[0, -1].float(), -1)
        tok = int(logp.argmax())
        ids.append(tok)
        lps.append(float(logp[tok]))
    return ids[len(prompt):], lps
