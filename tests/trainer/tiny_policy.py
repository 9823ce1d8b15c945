"""Shared test fixtures for trainer tests: a tiny rollart CausalLM and synthetic multi-turn trajectories."""
from __future__ import annotations

import random

import torch

from rollart.models import CausalLM, ModelConfig
from rollart.types import Trajectory

VOCAB = 32


def make_model(seed: int = 0) -> CausalLM:
    """A ~20k-parameter Qwen3-style model, deterministic for a seed."""
    cfg = ModelConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed), std=0.2)
    return model


def make_trajectories(num_groups: int = 3, group_size: int = 4, seed: int = 0,
                      versions: tuple[int, ...] = (0,)) -> list[Trajectory]:
    """Prompt (mask 0), then alternating model turns (mask 1) and observations (mask 0), varied lengths."""
    rng = random.Random(seed)
    out = []
    for g in range(num_groups):
        for i in range(group_size):
            ids, mask, lps, vers = [], [], [], []
            for _ in range(rng.randint(3, 6)):  # prompt
                ids.append(rng.randrange(VOCAB)); mask.append(0); lps.append(0.0); vers.append(-1)
            for _turn in range(rng.randint(1, 3)):
                v = rng.choice(versions)
                for _ in range(rng.randint(1, 4)):  # model tokens
                    ids.append(rng.randrange(VOCAB)); mask.append(1); lps.append(-rng.uniform(2.5, 4.0)); vers.append(v)
                for _ in range(rng.randint(0, 3)):  # observation
                    ids.append(rng.randrange(VOCAB)); mask.append(0); lps.append(0.0); vers.append(-1)
            out.append(Trajectory(trajectory_id=f"t{g}-{i}", group_id=f"g{g}", task="toy", token_ids=ids,
                                  loss_mask=mask, logprobs=lps, versions=vers, reward=float(rng.random() < 0.5)))
    return out


def params_of(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
