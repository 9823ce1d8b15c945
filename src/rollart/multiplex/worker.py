"""DeploymentWorker: one rank of a worker-process group (WPG) that time-shares a training deployment.

The worker owns one trainer per registered job, but only the *resident* job's model and optimizer state
is live; every other job's state sits in the node's StateManager (host or disk tier). ``offload`` /
``load`` are the two halves of a context switch; the Scheduler decides when to issue them, the Router
guarantees they and every other operation reach this worker one at a time. As a proof, the worker counts
operations in flight: ``max_in_flight`` must stay 1 (and it keeps its own log of executed operations).

Operations (the narrow API of PlexRL §4.2): forward, forward_backward, optim_step, train_step (the
two fused, exactly the private trainer's step), save/load checkpoint, weight_buckets (sync to rollout),
materialize (checkpoint straight from managed state, no switch needed).
"""
from __future__ import annotations

import threading
from typing import Any

import torch

from rollart.actors import blocking
from rollart.multiplex.state import StateManager
from rollart.trainer import TrainerConfig, make_trainer
from rollart.trainer.batching import build_batch


class NotResidentError(RuntimeError):
    """An operation reached a worker whose resident job is another one (a scheduler bug, never silent)."""


class DeploymentWorker:
    def __init__(self, spill_dir: str, rank: int = 0, offload_tier: str = "host"):
        self.rank = rank
        self.offload_tier = offload_tier
        self.state = StateManager(spill_dir)
        self.trainers: dict[str, Any] = {}
        self.resident: str | None = None
        self.log: list[tuple[int, str, str]] = []
        """(sequence number given by the router, job, operation) in execution order."""
        self._guard = threading.Lock()
        self._in_flight = 0
        self.max_in_flight = 0

    # ------------------------------------------------------------------ lifecycle of jobs
    @blocking
    def add_job(self, seq: int, job: str, cfg: TrainerConfig) -> int:
        """Build the job's trainer here; it becomes the resident job. Returns its version."""
        with self._op(seq, job, "add_job", need_resident=False):
            if job in self.trainers:
                raise ValueError(f"job {job!r} is already registered on this worker")
            if self.resident is not None:
                raise NotResidentError(f"add_job {job}: job {self.resident!r} is still resident; offload it first")
            if cfg.backend != "torch" or cfg.world_size != 1:
                raise ValueError(f"shared training service supports trainer.backend='torch' with world_size=1 per "
                                 f"rank; job {job!r} asked for backend={cfg.backend!r} world_size={cfg.world_size}")
            torch.set_num_threads(cfg.num_threads)
            self.trainers[job] = make_trainer(cfg)
            self.state.mark_device(job)
            self.resident = job
            return self.trainers[job].version

    @blocking
    def remove_job(self, seq: int, job: str) -> None:
        with self._op(seq, job, "remove_job", need_resident=False):
            self.trainers.pop(job, None)
            self.state.drop(job)
            if self.resident == job:
                self.resident = None

    @blocking
    def offload(self, seq: int, job: str, tier: str | None = None) -> dict:
        """Move the resident job's state into the StateManager and release the live tensors."""
        with self._op(seq, job, "offload"):
            tensors, _ = _state_refs(self.trainers[job])
            self.state.offload(job, {name: t for name, (t, _) in tensors.items()}, tier or self.offload_tier)
            for name in sorted(tensors, key=lambda n: not n.startswith("grad/")):  # grads before their params
                tensors[name][1](None)
            self.resident = None
            return self.state.stats()

    @blocking
    def load(self, seq: int, job: str) -> None:
        """Make ``job`` resident again from the StateManager (bit-exact)."""
        with self._op(seq, job, "load", need_resident=False):
            if self.resident is not None:
                raise NotResidentError(f"load {job}: job {self.resident!r} is still resident; offload it first")
            restored = self.state.restore(job)
            _, setters = _state_refs(self.trainers[job])
            for name, tensor in restored.items():
                setters[name](tensor)
            self.resident = job

    def prefetch(self, job: str) -> None:
        """Start moving ``job``'s state up from disk ahead of a predicted switch (returns at once)."""
        if job in self.trainers and self.state.tier(job) == "disk":
            self.state.prefetch(job)

    # ------------------------------------------------------------------ the narrow API
    @blocking
    def forward(self, seq: int, job: str, trajectories: list) -> list:
        """Per-token log-probs of each trajectory under the job's current weights."""
        with self._op(seq, job, "forward"):
            tr = self.trainers[job]
            batch = build_batch(trajectories, pad_id=tr.cfg.pad_id)
            from rollart.trainer.base import forward_logits
            from rollart.trainer.losses import token_logprobs
            with torch.no_grad():
                logp = token_logprobs(forward_logits(tr.policy, batch["input_ids"]), batch["input_ids"])  # (B, T)
            return [logp[i, : int(n)].numpy() for i, n in enumerate(batch["lengths"])]

    @blocking
    def forward_backward(self, seq: int, job: str, trajectories: list) -> dict:
        """Accumulate the RL loss gradient of ``trajectories`` (one mini-batch); optim_step applies it."""
        with self._op(seq, job, "forward_backward"):
            terms = self.trainers[job].forward_backward(trajectories)
            return {"losses/policy": terms.policy, "charts/loss_tokens": terms.loss_tokens}

    @blocking
    def optim_step(self, seq: int, job: str) -> dict:
        with self._op(seq, job, "optim_step"):
            tr = self.trainers[job]
            norm = tr.optimizer_step()
            return {"losses/grad_norm": norm, "charts/version": float(tr.version)}

    @blocking
    def train_step(self, seq: int, job: str, trajectories: list) -> dict:
        with self._op(seq, job, "train_step"):
            return self.trainers[job].train_step(trajectories)

    def get_version(self, job: str) -> int:
        return self._trainer(job).version

    @blocking
    def weight_buckets(self, seq: int, job: str, bucket_bytes: int) -> list:
        """Weights for rollout. A resident job exports its live weights; an offloaded one is served straight
        from managed state, without a context switch."""
        with self._op(seq, job, "weight_buckets", need_resident=False):
            from rollart.trainer.weight_store import bucketize
            tr = self._trainer(job)
            if self.resident == job:
                named = tr.named_tensors()
            else:
                names = [n for n, _ in tr.policy.named_parameters()]
                got = self.state.read(job, [f"policy/{n}" for n in names])
                named = [(n, got[f"policy/{n}"]) for n in names]
            return [([n for n, _ in b], [t for _, t in b]) for b in bucketize(named, bucket_bytes)]

    @blocking
    def save_checkpoint(self, seq: int, job: str, root: str, extra: dict, keep_last: int = 3) -> str:
        with self._op(seq, job, "save_checkpoint"):
            return str(self.trainers[job].save_checkpoint(root, extra, keep_last))

    @blocking
    def load_checkpoint(self, seq: int, job: str, path: str) -> dict:
        with self._op(seq, job, "load_checkpoint"):
            return self.trainers[job].load_checkpoint(path)

    @blocking
    def materialize(self, seq: int, job: str, path: str) -> str:
        """Checkpoint an offloaded job's full state from managed memory/disk, leaving it offloaded."""
        with self._op(seq, job, "materialize", need_resident=False):
            return str(self.state.materialize(job, path))

    def stats(self) -> dict:
        return {"resident": self.resident, "jobs": sorted(self.trainers), "max_in_flight": self.max_in_flight,
                "ops": len(self.log), **self.state.stats()}

    def op_log(self) -> list:
        return [list(e) for e in self.log]

    def on_stop(self) -> None:
        self.state.close()

    # ------------------------------------------------------------------ internals
    def _trainer(self, job: str) -> Any:
        tr = self.trainers.get(job)
        if tr is None:
            raise KeyError(f"job {job!r} is not registered on this worker; registered: {sorted(self.trainers)}")
        return tr

    def _op(self, seq: int, job: str, op: str, need_resident: bool = True) -> "_OpGuard":
        if op not in ("add_job", "remove_job"):
            self._trainer(job)
        if need_resident and self.resident != job:
            raise NotResidentError(f"{op} {job}: resident job is {self.resident!r}")
        return _OpGuard(self, seq, job, op)


class _OpGuard:
    def __init__(self, w: DeploymentWorker, seq: int, job: str, op: str):
        self.w, self.entry = w, (seq, job, op)

    def __enter__(self) -> None:
        with self.w._guard:
            self.w._in_flight += 1
            self.w.max_in_flight = max(self.w.max_in_flight, self.w._in_flight)
            self.w.log.append(self.entry)

    def __exit__(self, *exc) -> None:
        with self.w._guard:
            self.w._in_flight -= 1


def _state_refs(tr: Any) -> tuple[dict, dict]:
    """Every state tensor of a trainer by name, with a setter that replaces it (None = release).
    Returns ({name: (tensor, setter)}, {name: setter}); an aliased tensor (tied weights) appears under each
    name and the StateManager stores it once, so restoring every name re-creates the alias."""
    tensors: dict[str, tuple[torch.Tensor, Any]] = {}
    setters: dict[str, Any] = {}
    modules = [("policy", tr.policy), ("ref", getattr(tr, "ref_model", None)), ("critic", getattr(tr, "critic", None))]
    for prefix, module in modules:
        if module is None:
            continue
        for name, p in module.named_parameters(remove_duplicate=False):
            setter = _param_setter(p)
            tensors[f"{prefix}/{name}"] = (p.data, setter)
            setters[f"{prefix}/{name}"] = setter
            setters[f"grad/{prefix}/{name}"] = _grad_setter(p)
            if p.grad is not None:  # accumulated gradients (forward_backward before a switch) move too
                tensors[f"grad/{prefix}/{name}"] = (p.grad, setters[f"grad/{prefix}/{name}"])
        for name, b in module.named_buffers(remove_duplicate=False):
            owner, leaf = _owner(module, name)
            setter = _buffer_setter(owner, leaf)
            tensors[f"{prefix}.buf/{name}"] = (b, setter)
            setters[f"{prefix}.buf/{name}"] = setter
    for i, p in enumerate(tr.trainable_params):
        for k, v in tr.optimizer.state.get(p, {}).items():
            if isinstance(v, torch.Tensor):
                setter = _optim_setter(tr.optimizer.state[p], k)
                tensors[f"optim/{i}/{k}"] = (v, setter)
                setters[f"optim/{i}/{k}"] = setter
    return tensors, setters


def _param_setter(p: torch.nn.Parameter):
    def set_(t):
        p.data = torch.empty(0, dtype=p.dtype) if t is None else t
    return set_


def _grad_setter(p: torch.nn.Parameter):
    def set_(t):
        p.grad = t
    return set_


def _buffer_setter(owner: torch.nn.Module, leaf: str):
    def set_(t):
        setattr(owner, leaf, torch.empty(0, dtype=getattr(owner, leaf).dtype) if t is None else t)
    return set_


def _optim_setter(state: dict, key: str):
    def set_(t):
        state[key] = torch.empty(0, dtype=state[key].dtype) if t is None else t
    return set_


def _owner(module: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    path, _, leaf = name.rpartition(".")
    return (module.get_submodule(path) if path else module), leaf
