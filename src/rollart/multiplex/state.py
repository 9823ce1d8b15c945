"""StateManager: node-local authority over where each job's model/optimizer state lives (PlexRL §4.5).

Tiers, from hot to cold::

    device  the active copy a worker computes with (on these CPU machines: the live in-memory tensors)
    host    a warm offloaded copy (pinned memory when CUDA is present, plain RAM otherwise)
    disk    a cold copy in one safetensors file per job

State is indexed by *canonical keys* (logical tensor names), not by process ownership: a tensor that
several data-parallel ranks hold, or that one module aliases under two names (tied embeddings), is stored
once; ``stats()`` reports logical vs stored bytes. ``prefetch`` moves a job's state up from disk in a
background thread ahead of a predicted switch; ``materialize`` writes a checkpoint straight from managed
state, whatever tier it is in.
"""
from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

TIERS = ("device", "host", "disk")


@dataclass
class JobState:
    tier: str = "device"
    aliases: dict[str, str] = field(default_factory=dict)
    """Every name the caller used -> its canonical key (several names may share one key)."""
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    """Canonical key -> host copy (empty while the job is on disk or on device)."""
    replicas: dict[str, int] = field(default_factory=dict)
    """Canonical key -> how many ranks/names put it (de-duplicated copies)."""
    path: Path | None = None
    logical_bytes: int = 0


class StateManager:
    def __init__(self, spill_dir: str | Path, pin_memory: bool | None = None):
        self.spill_dir = Path(spill_dir)
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        self.pin = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.jobs: dict[str, JobState] = {}
        self._lock = threading.RLock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="state-prefetch")
        self._prefetch: dict[str, concurrent.futures.Future] = {}

    # ------------------------------------------------------------------ device -> host / disk
    def offload(self, job: str, named: dict[str, torch.Tensor] | list[dict[str, torch.Tensor]],
                tier: str = "host") -> JobState:
        """Take a job's state off the device into ``tier`` ("host" or "disk"). ``named`` is one dict of
        name -> tensor, or one dict per data-parallel rank: names present on several ranks (replicas) and
        names aliasing the same storage are stored once under one canonical key."""
        if tier not in ("host", "disk"):
            raise ValueError(f"offload tier must be 'host' or 'disk', got {tier!r}")
        ranks = named if isinstance(named, list) else [named]
        st = JobState(tier="host")
        by_storage: dict[tuple[int, int, tuple, tuple], str] = {}
        for rank_state in ranks:
            for name, t in rank_state.items():
                if not isinstance(t, torch.Tensor):
                    raise TypeError(f"offload {job}: state {name!r} is {type(t).__name__}, not a tensor")
                st.logical_bytes += t.numel() * t.element_size()
                sig = (t.data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
                key = by_storage.get(sig) if t.numel() else None
                if key is None and name in st.aliases:  # replica of this name from another rank
                    key = st.aliases[name]
                    if not torch.equal(st.tensors[key], t):
                        raise ValueError(f"offload {job}: ranks disagree on replicated tensor {name!r}; "
                                         "pass per-rank shards under distinct names")
                if key is None:
                    key = name
                    copy = torch.empty(t.shape, dtype=t.dtype, pin_memory=self.pin)
                    copy.copy_(t.detach())
                    st.tensors[key] = copy
                by_storage[sig] = key
                st.aliases[name] = key
                st.replicas[key] = st.replicas.get(key, 0) + 1
        with self._lock:
            self._drop_file(job)
            self.jobs[job] = st
        if tier == "disk":
            self.demote(job)
        return st

    def demote(self, job: str) -> None:
        """host -> disk: write the canonical tensors to one file and free the host copy."""
        with self._lock:
            st = self._job(job)
            if st.tier != "host":
                return
            path = self.spill_dir / f"{_safe(job)}.safetensors"
            save_file({k: v.contiguous() for k, v in st.tensors.items()}, str(path))
            st.path, st.tensors, st.tier = path, {}, "disk"

    # ------------------------------------------------------------------ disk -> host -> device
    def prefetch(self, job: str) -> concurrent.futures.Future:
        """Start moving ``job`` from disk to host in the background (ahead of a predicted switch)."""
        with self._lock:
            fut = self._prefetch.get(job)
            if fut is None or fut.done():
                fut = self._pool.submit(self._promote, job)
                self._prefetch[job] = fut
            return fut

    def _promote(self, job: str) -> None:
        with self._lock:
            st = self._job(job)
            if st.tier != "disk":
                return
            path = st.path
        loaded = load_file(str(path))
        if self.pin:
            loaded = {k: v.pin_memory() for k, v in loaded.items()}
        with self._lock:
            st.tensors, st.tier = loaded, "host"

    def restore(self, job: str) -> dict[str, torch.Tensor]:
        """Make ``job`` device-resident: returns every name it was offloaded under -> its tensor (aliases
        share one tensor, as they did before offload). The manager keeps no copy afterwards."""
        fut = self._prefetch.pop(job, None)
        if fut is not None:
            fut.result()
        self._promote(job)
        with self._lock:
            st = self._job(job)
            out = {name: st.tensors[key] for name, key in st.aliases.items()}
            self._drop_file(job)
            st.tensors, st.tier = {}, "device"
            return out

    def mark_device(self, job: str) -> None:
        """Record a job whose state was created on the device and never offloaded."""
        with self._lock:
            self.jobs.setdefault(job, JobState(tier="device"))

    def tier(self, job: str) -> str:
        return self._job(job).tier

    # ------------------------------------------------------------------ checkpoints from managed state
    def materialize(self, job: str, path: str | Path, names: list[str] | None = None) -> Path:
        """Write ``job``'s offloaded state (or the named subset) to a safetensors file without making the
        job resident: from host memory if warm, from its spill file if cold."""
        with self._lock:
            st = self._job(job)
            if st.tier == "device":
                raise RuntimeError(f"materialize {job}: state is on the device; ask its worker, or offload first")
            source = st.tensors if st.tier == "host" else load_file(str(st.path))
            wanted = names if names is not None else list(st.aliases)
            missing = [n for n in wanted if n not in st.aliases]
            if missing:
                raise KeyError(f"materialize {job}: unknown state names {missing[:3]}")
            keys = {st.aliases[n] for n in wanted}
            out = Path(path)
            out.parent.mkdir(parents=True, exist_ok=True)
            save_file({k: source[k].contiguous() for k in sorted(keys)}, str(out))
            return out

    def read(self, job: str, names: list[str]) -> dict[str, torch.Tensor]:
        """Copies of some offloaded tensors (e.g. the policy weights for a rollout sync), tier unchanged."""
        with self._lock:
            st = self._job(job)
            if st.tier == "device":
                raise RuntimeError(f"read {job}: state is on the device; ask its worker")
            missing = [n for n in names if n not in st.aliases]
            if missing:
                raise KeyError(f"read {job}: unknown state names {missing[:3]}")
            if st.tier == "host":
                return {n: st.tensors[st.aliases[n]].clone() for n in names}
            from safetensors import safe_open
            with safe_open(str(st.path), framework="pt") as f:
                return {n: f.get_tensor(st.aliases[n]) for n in names}

    def drop(self, job: str) -> None:
        with self._lock:
            self._drop_file(job)
            self.jobs.pop(job, None)

    def stats(self) -> dict[str, float]:
        with self._lock:
            logical = sum(s.logical_bytes for s in self.jobs.values())
            stored = sum(sum(t.numel() * t.element_size() for t in s.tensors.values())
                         for s in self.jobs.values())
            disk = sum(s.path.stat().st_size for s in self.jobs.values() if s.path and s.path.exists())
            return {"logical_bytes": logical, "host_bytes": stored, "disk_bytes": disk,
                    "jobs_on_host": sum(s.tier == "host" for s in self.jobs.values()),
                    "jobs_on_disk": sum(s.tier == "disk" for s in self.jobs.values())}

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------ internals
    def _job(self, job: str) -> JobState:
        st = self.jobs.get(job)
        if st is None:
            raise KeyError(f"StateManager has no state for job {job!r}; known: {sorted(self.jobs)}")
        return st

    def _drop_file(self, job: str) -> None:
        st = self.jobs.get(job)
        if st is not None and st.path is not None:
            st.path.unlink(missing_ok=True)
            st.path = None


def _safe(job: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in job)
