"""Turn finished trajectories into padded training tensors and split them into micro-batches.

A batch is a plain ``dict[str, torch.Tensor]`` (it crosses actor boundaries as zero-copy frames):

  input_ids       (B, T) int64   token ids, right-padded with ``pad_id``
  loss_mask       (B, T) float32 1.0 on model-generated tokens only
  behav_logprobs  (B, T) float32 log-prob recorded by the engine that sampled each token (0 elsewhere)
  versions        (B, T) int64   policy version that sampled each token (-1 on non-model tokens)
  advantages      (B, T) float32 GRPO group-normalised advantage broadcast on model tokens
  token_rewards   (B, T) float32 trajectory reward on its last model token (for PPO/GAE)
  rewards         (B,)   float32 trajectory reward
  lengths         (B,)   int64   unpadded length of each row
"""
from __future__ import annotations

from typing import Sequence

import torch

from rollart.types import Trajectory
from rollart.trainer.losses import group_advantages

class BatchError(ValueError):
    """A trajectory cannot be trained on; the message names it and the field that is wrong."""


def _check(traj: Trajectory) -> None:
    if traj.status in ("aborted", "failed"):
        raise BatchError(f"trajectory {traj.trajectory_id!r} is {traj.status} ({traj.reason or 'no reason'}); "
                         "drop aborted/failed trajectories before training (count them in rollout/ metrics)")
    n = len(traj.token_ids)
    for name in ("loss_mask", "logprobs", "versions"):
        if len(getattr(traj, name)) != n:
            raise BatchError(f"trajectory {traj.trajectory_id!r}: {name} has {len(getattr(traj, name))} "
                             f"entries but token_ids has {n}; per-token arrays must be aligned")
    if n == 0:
        raise BatchError(f"trajectory {traj.trajectory_id!r} has no tokens; drop it before training")
    if traj.loss_mask[0]:
        raise BatchError(f"trajectory {traj.trajectory_id!r}: loss_mask[0] is 1 but the first token has "
                         "no context to be predicted from; it must be a prompt token (mask 0)")


def build_batch(trajectories: Sequence[Trajectory], pad_id: int = 0, adv_eps: float = 1e-4,
                scale_adv_by_std: bool = True, max_len: int | None = None,
                advantages: Sequence[float] | None = None) -> dict[str, torch.Tensor]:
    """Pad ``trajectories`` to one (B, T) batch with GRPO advantages computed over their groups, or the given
    ``advantages`` (one per trajectory: a data-parallel shard's, computed over the whole batch's groups).

    ``max_len`` truncates rows from the right (their model tokens past it are not trained) — a
    guard for memory, off by default.
    """
    if not trajectories:
        raise BatchError("build_batch got no trajectories; wait for a non-empty batch")
    for traj in trajectories:
        _check(traj)
    rewards = [float(t.reward) for t in trajectories]
    if advantages is not None:
        if len(advantages) != len(trajectories):
            raise BatchError(f"build_batch got {len(advantages)} advantages for {len(trajectories)} trajectories")
        adv = torch.tensor([float(a) for a in advantages], dtype=torch.float32)
    else:
        adv = group_advantages(rewards, [t.group_id for t in trajectories], eps=adv_eps,
                               scale_by_std=scale_adv_by_std)  # (B,)
    # a forked agent trajectory (rollart.gateway.record): its earlier segments are rows of their own that share
    # its reward and advantage (the advantage is computed once per trajectory, above)
    rows = [(seg_traj, i) for i, t in enumerate(trajectories) for seg_traj in _segments(t)]
    adv = adv[[i for _, i in rows]]
    rewards = [rewards[i] for _, i in rows]
    trajectories = [t for t, _ in rows]
    T = max(len(t.token_ids) for t in trajectories)
    if max_len is not None:
        T = min(T, max_len)
    B = len(trajectories)
    batch = {
        "input_ids": torch.full((B, T), pad_id, dtype=torch.long),
        "loss_mask": torch.zeros(B, T),
        "behav_logprobs": torch.zeros(B, T),
        "versions": torch.full((B, T), -1, dtype=torch.long),
        "advantages": torch.zeros(B, T),
        "token_rewards": torch.zeros(B, T),
        "rewards": torch.tensor(rewards, dtype=torch.float32),
        "lengths": torch.zeros(B, dtype=torch.long),
    }
    for i, traj in enumerate(trajectories):
        n = min(len(traj.token_ids), T)
        mask = torch.tensor(traj.loss_mask[:n], dtype=torch.float32)
        batch["input_ids"][i, :n] = torch.tensor(traj.token_ids[:n], dtype=torch.long)
        batch["loss_mask"][i, :n] = mask
        batch["behav_logprobs"][i, :n] = torch.tensor(traj.logprobs[:n], dtype=torch.float32) * mask
        versions = torch.tensor(traj.versions[:n], dtype=torch.long)
        batch["versions"][i, :n] = torch.where(mask > 0, versions, torch.full_like(versions, -1))
        batch["advantages"][i, :n] = adv[i] * mask
        batch["lengths"][i] = n
        model_positions = mask.nonzero().flatten()
        if len(model_positions):
            batch["token_rewards"][i, model_positions[-1]] = rewards[i]
    return batch


def _segments(traj: Trajectory) -> list[Trajectory]:
    segments = [Trajectory(traj.trajectory_id, traj.group_id, traj.task, **seg) for seg in traj.info.get("segments", ())]
    for seg in segments:
        _check(seg)
    return segments + [traj]


def num_loss_tokens(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["loss_mask"].sum().item())


def select_rows(batch: dict[str, torch.Tensor], rows: Sequence[int] | torch.Tensor) -> dict[str, torch.Tensor]:
    """The sub-batch of the given row indices, with trailing all-padding columns trimmed."""
    rows = torch.as_tensor(rows, dtype=torch.long, device=batch["lengths"].device)
    sub = {k: v[rows] for k, v in batch.items()}
    T = int(sub["lengths"].max().item()) if len(rows) else 0
    for k, v in sub.items():
        if v.dim() == 2:  # every per-token tensor, including ones added by the trainer
            sub[k] = v[:, :T]
    return sub


def shard_of(trajectories: Sequence[Trajectory], rank: int, world_size: int) -> tuple[list[Trajectory], dict]:
    """What data-parallel rank ``rank`` is sent of a batch: its rows' trajectories, and the few numbers per row of
    the whole batch that keep its losses those of the unsharded batch (row count, rewards and groups, from
    which it computes the group advantages). ``Trainer.train_step(mine, shard=info)`` takes them."""
    rows = shard_rows(len(trajectories), rank, world_size)
    info = {"rows": rows, "n_rows": len(trajectories), "rewards": [float(t.reward) for t in trajectories],
            "groups": [t.group_id for t in trajectories]}
    return [trajectories[i] for i in rows], info


def shard_rows(num_rows: int, rank: int, world_size: int) -> list[int]:
    """Rows a data-parallel rank trains on: rank, rank + world, ... (balanced to within one row)."""
    return list(range(rank, num_rows, world_size))


def micro_batches(batch: dict[str, torch.Tensor], token_budget: int) -> list[dict[str, torch.Tensor]]:
    """Split rows into micro-batches whose padded size (rows x longest row) stays within the budget."""
    return [select_rows(batch, rows) for rows in micro_batch_rows(batch["lengths"].tolist(), token_budget)]


def micro_batch_rows(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Row indices of each micro-batch: padded size (rows x longest row) within ``token_budget``.

    Rows are sorted by length first so similar lengths share a micro-batch (less padding); a single row
    longer than the budget still forms its own micro-batch (it cannot be split without changing the
    loss). Every row lands in exactly one micro-batch.
    """
    if token_budget <= 0:
        raise ValueError(f"micro_batch_tokens must be positive, got {token_budget}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = max([lengths[j] for j in current] + [lengths[i]])
        if current and longest * (len(current) + 1) > token_budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups
