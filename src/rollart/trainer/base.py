"""The trainer interface and the RL train step shared by every backend.

A trainer is a plain class (it also runs as an actor). Its whole surface:

    trainer.version                         policy version; each train step advances it by one
    trainer.train_step(batch) -> metrics    batch = list[Trajectory] or a dict from build_batch
    trainer.forward_backward(batch)         accumulate one mini-batch's gradient -> LossTerms (named fields)
    trainer.optimizer_step() -> grad norm   apply it; the step that ends a train step makes the next version
    trainer.named_tensors() -> [(name, t)]  full CPU weights with HF-compatible names (may alias the live
                                            parameters: copy before the next train_step if you keep them)
    trainer.state_dict_buckets(nbytes)      the same, split into buckets for the weight store
    trainer.save_checkpoint(root, extra, keep_last)  atomic checkpoint, returns its folder
    trainer.load_checkpoint(path_or_root)   restores and returns ``extra`` (data position, buffer meta)
    trainer.close()

``train_step`` is built from ``forward_backward`` and ``optimizer_step``. Backends implement the protected
hooks ``_backward``, ``_optimizer_step``, ``_zero_grad``, ``_load_state`` (and, for data parallelism, ``_begin_micro``,
``_backward_nothing``, ``_forward_nothing``, ``_max_over_ranks``) and the checkpoint I/O; the step itself
(proximal/ref log-probs, advantages, mini- and micro-batching) lives here once, with the loss of a micro-batch
in :mod:`~rollart.trainer.objective`, the critic and reference networks in :mod:`~rollart.trainer.networks`
and the sums over data-parallel ranks in :mod:`~rollart.trainer.collectives`.
"""
from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn as nn

from rollart.trainer import checkpoint as ckpt
from rollart.trainer import losses as L
from rollart.trainer.batching import (build_batch, micro_batch_rows, micro_batches, num_loss_tokens,
                                      select_rows, shard_rows)
from rollart.trainer.collectives import all_reduce_max, all_reduce_sum
from rollart.trainer.config import TrainerConfig
from rollart.trainer.losses import LossTerms, group_advantages
from rollart.trainer.device import autocast, to_device, trainer_placement
from rollart.trainer.mismatch import mismatch_metrics, mismatch_sums
from rollart.trainer.networks import forward_logits, frozen_copy
from rollart.trainer.objective import micro_batch_loss
from rollart.versions import staleness

log = logging.getLogger(__name__)


class Trainer:
    """Backend-independent GRPO/PPO train step; subclasses supply the optimiser mechanics."""

    def __init__(self, cfg: TrainerConfig):
        self.cfg = cfg
        self.version = 0
        """The policy being trained; the optimizer_step that ends a train step advances it by one."""
        self._accumulated = 0  # forward_backward calls since the last optimizer_step
        self.mismatch: torch.Tensor | None = None  # train/inference mismatch sums of the step in progress (mismatch.py)
        torch.set_num_threads(cfg.num_threads)
        self.placement = trainer_placement(cfg)
        self.device = self.placement.device
        """Where the model, its optimizer state and every batch live (a backend may move it to its model's)."""
        self.compute_dtype = self.placement.dtype
        """The dtype forward/backward compute in and exported weights have (master weights stay float32)."""
        self.autocast_dtype: torch.dtype | None = None
        """Set by backends that compute under torch.autocast (fp32 weights); None: the model's own dtype."""

    @property
    def micro_batch_tokens(self) -> int:
        """The padded-token budget of one micro-batch on this trainer's device (``cfg.micro_batch_tokens``)."""
        return self.cfg.micro_batch_tokens_on(self.device.type)

    # ------------------------------------------------------------------ hooks for backends
    policy: nn.Module  # callable forward (a DeepSpeed engine for that backend)
    ref_model: nn.Module | None = None
    critic: nn.Module | None = None

    def _backward(self, loss: torch.Tensor) -> None:
        raise NotImplementedError

    def _begin_micro(self, last: bool) -> None:
        """Called before each micro-batch's forward; ``last`` marks the final one of a forward_backward (the
        DeepSpeed backend reduces gradients there, so it expects one forward_backward per optimizer_step)."""

    def _backward_nothing(self) -> None:
        """A zero-loss pass for a rank that has fewer micro-batches than another one."""

    def _forward_nothing(self) -> None:
        """A no-grad forward for a rank that has fewer precompute micro-batches than another one."""

    def _max_over_ranks(self, n: int) -> int:
        """Largest ``n`` over data-parallel ranks, where forward passes must match in number."""
        return n

    def _optimizer_step(self) -> float:
        """All-reduce (if data parallel), clip, step; return the global grad norm."""
        raise NotImplementedError

    def _zero_grad(self) -> None:
        raise NotImplementedError

    def named_tensors(self) -> list[tuple[str, torch.Tensor]]:
        raise NotImplementedError

    def save_checkpoint(self, root: str, extra: dict | None = None, keep_last: int = 3) -> str:
        """Atomic checkpoint of this trainer under ``root`` (the newest ``keep_last`` kept; 0 keeps all)."""
        raise NotImplementedError

    def load_checkpoint(self, path: str) -> dict:
        """Restore from a checkpoint folder, or from the newest intact one under a root (older ones are tried
        when the newest fails its checksums or does not load); returns ``extra``. A folder that fails, or a
        root with no intact checkpoint, raises ``checkpoint.CheckpointError`` naming the bad file."""
        path = Path(path)
        if ckpt.is_complete(path):
            return self._load_folder(ckpt.check(path))
        return ckpt.load_newest_intact(path, self._load_folder)[1]

    def _load_folder(self, folder: Path) -> dict:
        meta = ckpt.read_meta(folder)
        self._load_state(folder)
        ckpt.restore_rng(folder, self.cfg.rank)
        self.version = int(meta["version"])
        return meta.get("extra", {})

    def _load_state(self, folder: Path) -> None:
        """Load the backend's model and optimizer state from a complete checkpoint folder (each file through
        ``checkpoint.load_file``, so a failure names the file)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ shared API
    def state_dict_buckets(self, bucket_bytes: int) -> list[list[tuple[str, torch.Tensor]]]:
        from rollart.weightplane.store import bucketize
        return bucketize(self.named_tensors(), bucket_bytes)

    def get_version(self) -> int:
        return self.version

    def _make_reference(self, model: nn.Module) -> nn.Module | None:
        """The reference policy of the KL term: a frozen copy of ``model``, or None without a KL term."""
        return frozen_copy(model) if self.cfg.kl_coef > 0 else None

    def train_step(self, batch: Sequence[Any] | dict[str, torch.Tensor], shard: dict | None = None) -> dict[str, float]:
        """One RL update on ``batch``.

        Data parallel, every rank is called either with the whole batch (it trains its rows of it) or, with
        ``shard`` (``batching.shard_of``), with its rows' trajectories only: the whole batch's row count, rewards
        and groups then give the same advantages, and the loss-token counts summed over ranks the same
        normalisation, so the losses equal the unsharded batch's.

        Built from the public steps: per-token quantities fixed for the step are computed once, then each
        mini-batch (``num_minibatches`` per epoch, ``ppo_epochs`` epochs) is one ``forward_backward`` over
        this rank's rows and one ``optimizer_step``; the last one makes the new version.
        """
        cfg = self.cfg
        t0 = time.perf_counter()
        sum_ranks = partial(all_reduce_sum, world_size=cfg.world_size, device=self.device)
        # 1) this rank's rows, with tokens older than max_staleness masked out
        if shard is None:
            batch = dict(self._as_batch(batch))
            n_rows = len(batch["lengths"])
            my_rows = shard_rows(n_rows, cfg.rank, cfg.world_size)
        else:
            if isinstance(batch, dict) or not batch:
                raise TypeError("train_step(shard=...) takes the shard's trajectories (at least one)")
            n_rows, my_rows = shard["n_rows"], list(shard["rows"])
            adv = group_advantages(shard["rewards"], shard["groups"], eps=cfg.adv_eps,
                                   scale_by_std=cfg.scale_adv_by_std)  # over the whole batch's groups
            batch = dict(to_device(build_batch(batch, pad_id=cfg.pad_id, advantages=adv[my_rows].tolist()),
                                   self.device))
        lag = staleness(self.version, batch["versions"]) * (batch["loss_mask"] > 0)  # (B, T)
        if cfg.max_staleness is not None:
            batch["loss_mask"] = batch["loss_mask"] * (lag <= cfg.max_staleness)
        # 2) what the whole batch sums to: here, or over ranks when each holds its shard only
        if shard is None:
            whole, local = batch, select_rows(batch, my_rows)
            total_tokens = num_loss_tokens(batch)
            stale = (float(L.masked_mean(lag.float(), batch["loss_mask"])), float(lag.max()))
            reward_mean = float(batch["rewards"].mean())
        else:
            whole, local = None, batch
            sums = sum_ranks(torch.tensor([float(num_loss_tokens(batch)),
                                                      float((lag.float() * batch["loss_mask"]).sum())],
                                                     dtype=torch.float64))
            total_tokens = int(sums[0].item())
            stale = (float(sums[1].item()) / max(total_tokens, 1),
                     all_reduce_max(float(lag.max()), cfg.world_size, self.device))
            reward_mean = float(torch.tensor(shard["rewards"]).mean())
        metrics: dict[str, float] = {
            "rollout/reward_mean": reward_mean,
            "rollout/staleness_mean": stale[0],
            "rollout/staleness_max": stale[1],
            "charts/loss_tokens": float(total_tokens),
        }
        if total_tokens == 0:
            # nothing trainable (e.g. every token older than max_staleness): keep the weights, still advance
            # the version so the caller's version numbering stays in step, and say so in the metrics
            log.warning("train_step: batch of %d trajectories has no trainable tokens (loss_mask all 0 after "
                        "max_staleness=%s); weights unchanged", n_rows, cfg.max_staleness)
            self.version += 1
            return {**metrics, "charts/skipped_empty_batch": 1.0, "charts/version": float(self.version)}

        # 3) per-token quantities fixed for the whole step: proximal / reference log-probs, old values
        self._precompute(local)
        # train/inference mismatch on the tokens of this version: prox log-probs are the current weights' when
        # several updates need them, else the single update's own forward (before its optimizer step) is
        self.mismatch = torch.zeros(3, dtype=torch.float64)
        if self._multi_update():
            self.mismatch = mismatch_sums(local["prox_logprobs"], local["behav_logprobs"], local["loss_mask"],
                                          local["versions"], self.version)

        # 4) mini-batches (optimizer steps) over rows; each rank trains its rows of each mini-batch
        bounds = sorted(set(torch.linspace(0, n_rows, cfg.num_minibatches + 1).long().tolist()))  # no empty ones
        updates = cfg.ppo_epochs * (len(bounds) - 1)
        terms = LossTerms()
        grad_norms = []
        for _ in range(cfg.ppo_epochs):
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                mine = [i for i, r in enumerate(my_rows) if lo <= r < hi]
                if whole is not None:
                    normalizer = max(num_loss_tokens(select_rows(whole, list(range(lo, hi)))), 1)
                else:  # this mini-batch's loss tokens on every rank
                    normalizer = max(int(sum_ranks(torch.tensor(
                        [float(num_loss_tokens(select_rows(local, mine)))], dtype=torch.float64)).item()), 1)
                terms = terms + self.forward_backward(select_rows(local, mine), normalizer)
                grad_norms.append(self.optimizer_step(end_of_step=len(grad_norms) + 1 == updates))
        terms = LossTerms.from_tensor(sum_ranks(terms.to_tensor()))
        metrics.update(terms.metrics(updates))
        metrics.update(mismatch_metrics(sum_ranks(self.mismatch), float(total_tokens)))
        self.mismatch = None
        metrics["losses/grad_norm"] = float(sum(grad_norms) / len(grad_norms))
        metrics["charts/version"] = float(self.version)
        metrics["system/train_step_s"] = time.perf_counter() - t0
        return metrics

    def forward_backward(self, batch: Sequence[Any] | dict[str, torch.Tensor],
                         normalizer: float | None = None) -> LossTerms:
        """Accumulate the RL loss gradient of ``batch`` (this rank's rows of one mini-batch); returns its terms.

        ``batch`` is trajectories or a dict from ``build_batch``; the per-token quantities fixed for a step
        (proximal and reference log-probs, old values) are computed here unless the batch carries them
        already. Losses are divided by ``normalizer``, by default the batch's loss tokens. Gradients add up
        over calls until ``optimizer_step`` applies them; on every data-parallel rank the calls must match.
        """
        batch = self._as_batch(batch)
        if "prox_logprobs" not in batch:
            batch = dict(batch)
            self._precompute(batch)
        if normalizer is None:
            normalizer = max(num_loss_tokens(batch), 1)
        micros = micro_batches(batch, self.micro_batch_tokens)
        # ranks with fewer micro-batches run zero-loss passes so collectives inside forward
        # (ZeRO-3 parameter gathers) and the gradient reduction line up on every rank
        n_passes = self._max_over_ranks(len(micros))
        if not self._accumulated:
            self._zero_grad()
        terms = LossTerms()
        for i in range(n_passes):
            self._begin_micro(last=i == n_passes - 1)
            if i < len(micros):
                loss, micro_terms = self._loss(micros[i], normalizer)
                self._backward(loss)
                terms = terms + micro_terms
            else:
                self._backward_nothing()
        self._accumulated += 1
        return terms

    def optimizer_step(self, end_of_step: bool = True) -> float:
        """Apply the gradients accumulated since the last step; returns the global grad norm.

        ``end_of_step``: this update ends a train step, so the policy becomes the next version (train_step
        passes False for every mini-batch update but its last: the weights in between are never published).
        """
        if not self._accumulated:
            raise RuntimeError("optimizer_step: no forward_backward since the last optimizer_step")
        norm = self._optimizer_step()
        self._accumulated = 0
        if end_of_step:
            self.version += 1
        return norm

    # ------------------------------------------------------------------ internals
    def _as_batch(self, batch: Sequence[Any] | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch as tensors on the model's device (built on the CPU from trajectories, then moved once)."""
        if not isinstance(batch, dict):
            batch = build_batch(batch, pad_id=self.cfg.pad_id, adv_eps=self.cfg.adv_eps,
                                scale_adv_by_std=self.cfg.scale_adv_by_std)
        return to_device(batch, self.device)

    def _forward(self, model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) of ``model`` in the compute dtype (under autocast when the backend uses it)."""
        with autocast(self.device, self.autocast_dtype):
            return forward_logits(model, ids)

    def _values(self, ids: torch.Tensor) -> torch.Tensor:
        """The critic's values (B, T) in float32."""
        with autocast(self.device, self.autocast_dtype):
            return self.critic(ids).float()

    @torch.no_grad()
    def _precompute(self, local: dict[str, torch.Tensor]) -> None:
        cfg = self.cfg
        # with a single update per step the proximal policy *is* the policy of the training forward, so its
        # log-probs come free from that forward (detached); only several updates need a separate pass
        need_prox = self._multi_update()
        B, T = local["input_ids"].shape
        local["prox_logprobs"] = local["behav_logprobs"].clone()
        local["ref_logprobs"] = torch.zeros(B, T, device=self.device)
        local["old_values"] = torch.zeros(B, T, device=self.device)
        if cfg.algorithm == "ppo":
            local["returns"] = torch.zeros(B, T, device=self.device)
        groups = micro_batch_rows(local["lengths"].tolist(), self.micro_batch_tokens) if B else []
        if need_prox:
            for _ in range(self._max_over_ranks(len(groups)) - len(groups)):
                self._forward_nothing()
        for rows in groups:
            mb = select_rows(local, rows)
            ids, mask = mb["input_ids"], mb["loss_mask"]
            n = ids.shape[1]
            if need_prox:
                local["prox_logprobs"][rows, :n] = L.token_logprobs(self._forward(self.policy, ids), ids) * mask
            if self.ref_model is not None:
                local["ref_logprobs"][rows, :n] = L.token_logprobs(self._forward(self.ref_model, ids), ids)
            if cfg.algorithm == "ppo":
                values = self._values(ids) * mask  # (b, n)
                adv, ret = L.gae(mb["token_rewards"], values, mask, cfg.gamma, cfg.gae_lambda)
                local["old_values"][rows, :n] = values
                local["advantages"][rows, :n] = adv
                local["returns"][rows, :n] = ret

    def _multi_update(self) -> bool:
        return self.cfg.ppo_epochs > 1 or self.cfg.num_minibatches > 1

    def _loss(self, mb: dict[str, torch.Tensor], normalizer: float) -> tuple[torch.Tensor, LossTerms]:
        ids = mb["input_ids"]
        logits = self._forward(self.policy, ids)  # (B, T, V), compute dtype
        logp = L.token_logprobs(logits, ids)  # (B, T)
        if self.mismatch is not None and not self._multi_update():
            self.mismatch += mismatch_sums(logp, mb["behav_logprobs"], mb["loss_mask"], mb["versions"], self.version)
        values = self._values(ids) if self.cfg.algorithm == "ppo" else None  # (B, T)
        return micro_batch_loss(self.cfg, mb, logits, logp, normalizer, multi_update=self._multi_update(),
                                with_kl=self.ref_model is not None, values=values)
