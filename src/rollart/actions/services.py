"""GPU-service manager of a run (ARL-Tangram §5.3, evict-on-execution): model services (reward models, judges)
restored onto the device when an action needs them and evicted, least recently used first, to keep the
resident weights within a memory budget.

Each service's host copy is a safetensors file on disk, written once at start. A restore builds the module's
structure without weights and loads them from that file onto the device (on a machine without a GPU the
device is the CPU: the load is real, from disk into process memory); an eviction drops the device copy and
frees its memory. The device is one unit of a :class:`rollart.actions.gpu.GpuPool`, so service calls are
actions the scheduler queues and starts one at a time.
"""
from __future__ import annotations

import gc
import os
import tempfile
import time
from typing import Any, Callable

import torch
from safetensors.torch import load_file, save_file

from rollart.actions.gpu import Chunk, DeviceCache, GpuPool


class ServiceManager:
    """Named model services, their disk copies, and the device cache that restores and evicts them."""

    def __init__(self, factories: dict[str, Callable[[], torch.nn.Module]], memory_budget_bytes: float = 0.0,
                 device: str = "", workdir: str = ""):
        self.factories = dict(factories)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.workdir = workdir or tempfile.mkdtemp(prefix="rollart-services-")
        self.paths: dict[str, str] = {}
        self.bytes: dict[str, float] = {}
        for name, make in self.factories.items():
            state = _untied(make().state_dict())
            self.paths[name] = os.path.join(self.workdir, f"{name}.safetensors")
            save_file(state, self.paths[name])
            self.bytes[name] = float(sum(v.numel() * v.element_size() for v in state.values()))
        budget = memory_budget_bytes or sum(self.bytes.values())
        if budget < max(self.bytes.values(), default=0.0):
            biggest = max(self.bytes, key=self.bytes.get)
            raise ValueError(f"service memory budget {budget / 2**20:.2f} MiB is below service {biggest!r} "
                             f"({self.bytes[biggest] / 2**20:.2f} MiB): raise actions.service_memory_mb")
        self.pool = GpuPool("gpu", node_sizes=[1])
        self.cache = DeviceCache(self.pool, budget, self.bytes, restore=self._restore, evict=self._evict)
        self.restore_seconds: list[float] = []
        self.evict_seconds: list[float] = []

    def _restore(self, service: str, chunk: Chunk) -> torch.nn.Module:
        t0 = time.perf_counter()
        with torch.device("meta"):
            module = self.factories[service]()
        weights = load_file(self.paths[service], device=str(self.device))
        module.load_state_dict(weights, strict=False, assign=True)
        tie = getattr(module, "tie_weights", None)
        if tie is not None:
            tie()
        if any(p.is_meta for p in module.parameters()):
            raise RuntimeError(f"service {service!r}: weights missing from {self.paths[service]}")
        self.restore_seconds.append(time.perf_counter() - t0)
        return module.eval()

    def _evict(self, service: str, chunk: Chunk, module: Any) -> None:
        t0 = time.perf_counter()
        for p in module.parameters():
            p.data = torch.empty(0)
        del module
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.evict_seconds.append(time.perf_counter() - t0)

    def run(self, service: str, chunk: Chunk, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(module, *args)`` on the service's device copy (restored first if it is not resident)."""
        module, _ = self.cache.ensure(service, chunk)
        return fn(module, *args)

    def resident_bytes(self) -> float:
        """Bytes of parameters the resident device copies hold now (counted from the tensors themselves)."""
        seen: set[int] = set()
        total = 0
        for module in self.cache.resident.values():
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    total += p.numel() * p.element_size()
        return float(total)


def _untied(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage: keep one copy of tied weights (the module re-ties them)."""
    out, seen = {}, {}
    for k, v in state.items():
        key = (v.data_ptr(), v.shape)
        if key in seen:
            continue
        seen[key] = k
        out[k] = v.detach().contiguous().clone()
    return out

