"""Shared fixtures for the multiplex tests: a tiny saved policy and synthetic GRPO trajectories."""
from __future__ import annotations

import random
from pathlib import Path

import torch

from rollart.models import CausalLM, ModelConfig, save_model
from rollart.trainer import TrainerConfig
from rollart.types import Trajectory

VOCAB = 32


def save_tiny_policy(folder: Path, seed: int = 0, tie: bool = False) -> str:
    cfg = ModelConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                      tie_word_embeddings=tie)
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed), std=0.2)
    save_model(model, folder)
    return str(folder)


def trajectories(num_groups: int = 2, group_size: int = 4, seed: int = 0, version: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for g in range(num_groups):
        for i in range(group_size):
            n_prompt, n_gen = rng.randint(3, 6), rng.randint(2, 5)
            ids = [rng.randrange(VOCAB) for _ in range(n_prompt + n_gen)]
            mask = [0] * n_prompt + [1] * n_gen
            lps = [0.0] * n_prompt + [-rng.uniform(2.5, 4.0) for _ in range(n_gen)]
            vers = [-1] * n_prompt + [version] * n_gen
            out.append(Trajectory(trajectory_id=f"t{seed}-{g}-{i}", group_id=f"g{seed}-{g}", task="toy",
                                  token_ids=ids, loss_mask=mask, logprobs=lps, versions=vers,
                                  reward=float(rng.random() < 0.5)))
    return out


def trainer_config(model_path: str, **kw) -> TrainerConfig:
    return TrainerConfig(model_path=model_path, num_threads=1, lr=1e-2, **kw)
