"""DeploymentWorker: one rank of a worker-process group (WPG) that time-shares a training deployment.

The worker owns one trainer per registered job, but only the *resident* job's model and optimizer state
is live; every other job's state sits in the node's StateManager (host or disk tier). ``Offload`` /
``Load`` are the two halves of a context switch; the Scheduler decides when to issue them, the Router
guarantees they and every other operation reach this worker one at a time, each as an ``Operation``
(``rollart.multiplex.messages``) that ``run`` answers. As a proof, the worker counts operations in flight:
``max_in_flight`` must stay 1 (and it keeps its own log of executed operations).

Operations (the narrow API of PlexRL §4.2): Forward, ForwardBackward, OptimStep, TrainStep (the two fused,
exactly the private trainer's step), SaveCheckpoint / LoadCheckpoint, WeightBuckets (sync to rollout),
Materialize (checkpoint straight from managed state, no switch needed); and the job lifecycle, AddJob /
RemoveJob. Outside the serial order it answers a job's GetVersion and DeviceStats (as a ``JobMessage``), the
Prefetch hint, GetStats and OpLog.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from rollart.actors import blocking, handles
from rollart.devices import peak_memory
from rollart.messages import DeviceStats, GetStats, GetVersion, LoadCheckpoint, SaveCheckpoint, TrainStep, WeightBuckets
from rollart.multiplex.messages import (AddJob, Forward, ForwardBackward, JobMessage, Load, Materialize, Offload,
                                        OpLog, Operation, OptimStep, Prefetch, RemoveJob, op_name)
from rollart.multiplex.state import StateManager
from rollart.trainer import make_trainer
from rollart.trainer.batching import build_batch


class NotResidentError(RuntimeError):
    """An operation reached a worker whose resident job is another one (a scheduler bug, never silent)."""


_OPERATIONS: dict[type, tuple[Callable, bool]] = {}
"""Operation request type -> (the DeploymentWorker method that runs it, whether the job must be resident)."""


def _runs(request: type, resident: bool = True) -> Callable[[Callable], Callable]:
    """Mark the method that runs ``request`` operations (``fn(self, job, request)``); ``resident``: only while
    the job is the resident one."""
    def mark(fn: Callable) -> Callable:
        _OPERATIONS[request] = (fn, resident)
        return fn
    return mark


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

    @handles(Operation)
    @blocking
    def run(self, op: Operation) -> Any:
        """One operation of ``op.job``, the ``op.seq``-th the Router admitted on this deployment."""
        entry = _OPERATIONS.get(type(op.request))
        if entry is None:
            raise TypeError(f"a deployment worker runs no {type(op.request).__qualname__} operation; it runs "
                            f"{', '.join(t.__name__ for t in _OPERATIONS)}")
        method, need_resident = entry
        name = op_name(op.request)
        if not isinstance(op.request, (AddJob, RemoveJob)):
            self._trainer(op.job)
        if need_resident and self.resident != op.job:
            raise NotResidentError(f"{name} {op.job}: resident job is {self.resident!r}")
        with _OpGuard(self, op.seq, op.job, name):
            return method(self, op.job, op.request)

    # ------------------------------------------------------------------ lifecycle of jobs
    @_runs(AddJob, resident=False)
    def _add_job(self, job: str, msg: AddJob) -> int:
        """Build the job's trainer here; it becomes the resident job. Returns its version."""
        cfg = msg.config
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

    @_runs(RemoveJob, resident=False)
    def _remove_job(self, job: str, msg: RemoveJob) -> None:
        self.trainers.pop(job, None)
        self.state.drop(job)
        if self.resident == job:
            self.resident = None

    @_runs(Offload)
    def _offload(self, job: str, msg: Offload) -> dict:
        """Move the resident job's state into the StateManager and release the live tensors."""
        tensors, _ = _state_refs(self.trainers[job])
        self.state.offload(job, {name: t for name, (t, _) in tensors.items()}, msg.tier or self.offload_tier)
        for name in sorted(tensors, key=lambda n: not n.startswith("grad/")):  # grads before their params
            tensors[name][1](None)
        self.resident = None
        return self.state.stats()

    @_runs(Load, resident=False)
    def _load(self, job: str, msg: Load) -> None:
        """Make ``job`` resident again from the StateManager (bit-exact)."""
        if self.resident is not None:
            raise NotResidentError(f"load {job}: job {self.resident!r} is still resident; offload it first")
        restored = self.state.restore(job)
        _, setters = _state_refs(self.trainers[job])
        for name, tensor in restored.items():
            setters[name](tensor)
        self.resident = job

    @handles(Prefetch)
    def prefetch(self, msg: Prefetch) -> None:
        """Start moving ``msg.job``'s state up from disk ahead of a predicted switch (returns at once)."""
        if msg.job in self.trainers and self.state.tier(msg.job) == "disk":
            self.state.prefetch(msg.job)

    # ------------------------------------------------------------------ the narrow API
    @_runs(Forward)
    def _forward(self, job: str, msg: Forward) -> list:
        """Per-token log-probs of each trajectory under the job's current weights."""
        tr = self.trainers[job]
        batch = build_batch(msg.trajectories, pad_id=tr.cfg.pad_id)
        from rollart.trainer.networks import forward_logits
        from rollart.trainer.losses import token_logprobs
        with torch.no_grad():
            logp = token_logprobs(forward_logits(tr.policy, batch["input_ids"]), batch["input_ids"])  # (B, T)
        return [logp[i, : int(n)].numpy() for i, n in enumerate(batch["lengths"])]

    @_runs(ForwardBackward)
    def _forward_backward(self, job: str, msg: ForwardBackward) -> dict:
        """Accumulate the RL loss gradient of one mini-batch; OptimStep applies it."""
        terms = self.trainers[job].forward_backward(msg.trajectories)
        return {"losses/policy": terms.policy, "charts/loss_tokens": terms.loss_tokens}

    @_runs(OptimStep)
    def _optim_step(self, job: str, msg: OptimStep) -> dict:
        tr = self.trainers[job]
        norm = tr.optimizer_step()
        return {"losses/grad_norm": norm, "charts/version": float(tr.version)}

    @_runs(TrainStep)
    def _train_step(self, job: str, msg: TrainStep) -> dict:
        return self.trainers[job].train_step(msg.trajectories, shard=msg.shard)

    @_runs(WeightBuckets, resident=False)
    def _weight_buckets(self, job: str, msg: WeightBuckets) -> list:
        """Weights for rollout. A resident job exports its live weights; an offloaded one is served straight
        from managed state, without a context switch."""
        from rollart.weightplane.store import bucketize
        tr = self.trainers[job]
        if self.resident == job:
            named = tr.named_tensors()
        else:
            names = [n for n, _ in tr.policy.named_parameters()]
            got = self.state.read(job, [f"policy/{n}" for n in names])
            named = [(n, got[f"policy/{n}"]) for n in names]
        return [([n for n, _ in b], [t for _, t in b]) for b in bucketize(named, msg.bucket_bytes)]

    @_runs(SaveCheckpoint)
    def _save_checkpoint(self, job: str, msg: SaveCheckpoint) -> str:
        return str(self.trainers[job].save_checkpoint(msg.root, msg.extra, msg.keep_last))

    @_runs(LoadCheckpoint)
    def _load_checkpoint(self, job: str, msg: LoadCheckpoint) -> dict:
        return self.trainers[job].load_checkpoint(msg.path)

    @_runs(Materialize, resident=False)
    def _materialize(self, job: str, msg: Materialize) -> str:
        """Checkpoint an offloaded job's full state from managed memory/disk, leaving it offloaded."""
        return str(self.state.materialize(job, msg.path))

    # ------------------------------------------------------------------ outside the serial order
    @handles(JobMessage)
    def job_query(self, msg: JobMessage) -> Any:
        """A job's GetVersion (its trainer's version) or DeviceStats (where it computes, peak GPU memory)."""
        tr = self._trainer(msg.job)
        if isinstance(msg.message, GetVersion):
            return tr.version
        if isinstance(msg.message, DeviceStats):
            return {"device": str(tr.device), "dtype": str(tr.compute_dtype).removeprefix("torch."),
                    **peak_memory(tr.device)}
        raise TypeError(f"a deployment worker answers a job's GetVersion or DeviceStats outside the serial order, "
                        f"not {type(msg.message).__qualname__}")

    @handles(GetStats)
    def stats(self, msg: GetStats) -> dict:
        return {"resident": self.resident, "jobs": sorted(self.trainers), "max_in_flight": self.max_in_flight,
                "ops": len(self.log), **self.state.stats()}

    @handles(OpLog)
    def op_log(self, msg: OpLog) -> list:
        return [list(e) for e in self.log]

    def on_stop(self) -> None:
        self.state.close()

    # ------------------------------------------------------------------ internals
    def _trainer(self, job: str) -> Any:
        tr = self.trainers.get(job)
        if tr is None:
            raise KeyError(f"job {job!r} is not registered on this worker; registered: {sorted(self.trainers)}")
        return tr


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
    modules = [("policy", tr.policy), ("ref", tr.ref_model), ("critic", tr.critic)]
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
