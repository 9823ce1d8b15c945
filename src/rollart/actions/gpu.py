"""GPU manager via evict-on-execution (ARL-Tangram §5.3).

- :class:`GpuPool` organises each node's 8 GPUs as buddy chunks (start, size) with size 1/2/4/8 and
  start divisible by size. Allocating ``m`` units takes the smallest free chunk of size
  ``2^ceil(log2 m)`` or larger, splitting it; among equal chunks it prefers one whose GPUs already
  hold the requested service. Release merges free buddies back.
- :class:`DeviceCache` keeps service instances resident per chunk under a per-GPU memory cap. Running
  an action on a chunk restores the service there from its host copy if it is not resident,
  evicting least-recently-used instances that overlap the chunk until it fits. Eviction only drops
  the device copy (the host copy never changes). A DoP variant of a service is a distinct instance.
- :class:`TorchServiceHost` is the real "device" on CPU machines: host copies are state dicts; a
  restore builds the module and copies the weights in; the memory cap is enforced on real tensor bytes.
"""
from __future__ import annotations

import collections
import itertools
import time
from typing import Any, Callable, Optional

from rollart.actions.dp import CHUNK_SIZES, ChunkOperator, chunk_size_for, take_chunk

Chunk = tuple[int, int, int]  # (node, start, size)


class GpuPool:
    """Buddy-chunk GPU units over ``nodes`` nodes of ``per_node`` (8) GPUs each."""

    elastic_units = True

    def __init__(self, name: str = "gpu", nodes: int = 1, per_node: int = 8,
                 node_sizes: Optional[list[int]] = None):
        sizes = list(node_sizes) if node_sizes is not None else [per_node] * nodes
        if not sizes or any(s not in CHUNK_SIZES for s in sizes):
            raise ValueError(f"GPU nodes must have one of {CHUNK_SIZES} GPUs each, got {sizes}")
        self.name, self.nodes, self.node_sizes = name, len(sizes), sizes
        self.per_node = max(sizes)
        self.capacity = sum(sizes)
        self.free_chunks: set[Chunk] = {(n, 0, size) for n, size in enumerate(sizes)}
        self.cache: Optional[DeviceCache] = None  # set by DeviceCache to prefer warm chunks
        self.used = 0
        self.peak = 0

    def state(self) -> tuple[int, ...]:
        counts = collections.Counter(size for _, _, size in self.free_chunks)
        return tuple(counts.get(s, 0) for s in CHUNK_SIZES)

    def take(self, state: tuple[int, ...], amount: float) -> Optional[tuple[int, ...]]:
        return take_chunk(state, int(amount))

    def operator_from(self, state: tuple[int, ...]) -> ChunkOperator:
        return ChunkOperator(state)

    def free(self) -> int:
        return sum(size for _, _, size in self.free_chunks)

    def acquire(self, amount: float, action: Any = None) -> Chunk:
        size = chunk_size_for(int(amount))
        fitting = [c for c in self.free_chunks if c[2] >= size]
        if not fitting:
            raise RuntimeError(f"pool {self.name!r}: no free chunk of {size} GPUs (scheduler bug)")
        service = getattr(action, "service", None)
        smallest = min(c[2] for c in fitting)
        same_level = [c for c in fitting if c[2] == smallest]

        def warmth(c: Chunk) -> int:
            return self.cache.warm_units(service, c) if (self.cache and service) else 0

        chunk = max(same_level, key=lambda c: (warmth(c), -c[0], -c[1]))
        self.free_chunks.remove(chunk)
        node, start, csize = chunk
        if csize > size:  # split: keep the half holding the most of the service, free the rest
            best = max(range(start, start + csize, size),
                       key=lambda s: (warmth((node, s, size)), -s))
            self._free_split(node, start, csize, best, size)
            chunk = (node, best, size)
        self.used += size
        self.peak = max(self.peak, self.used)
        return chunk

    def _free_split(self, node: int, start: int, csize: int, keep: int, size: int) -> None:
        while csize > size:
            half = csize // 2
            if keep < start + half:
                self.free_chunks.add((node, start + half, half))
            else:
                self.free_chunks.add((node, start, half))
                start += half
            csize = half

    def release(self, chunk: Chunk) -> None:
        node, start, size = chunk
        self.used -= size
        while size < self.node_sizes[node]:  # merge with a free buddy
            buddy = (node, start ^ size, size)
            if buddy not in self.free_chunks:
                break
            self.free_chunks.remove(buddy)
            start, size = min(start, buddy[1]), size * 2
        self.free_chunks.add((node, start, size))

    def next_change(self) -> Optional[float]:
        return None


def gpus_of(chunk: Chunk) -> list[tuple[int, int]]:
    node, start, size = chunk
    return [(node, g) for g in range(start, start + size)]


class DeviceCache:
    """Resident service instances per chunk, an LRU order and a per-GPU memory cap (bytes)."""

    def __init__(self, pool: GpuPool, gpu_memory: float, service_bytes: dict[str, float],
                 restore: Callable[[str, Chunk], Any] = lambda s, c: None,
                 evict: Callable[[str, Chunk, Any], None] = lambda s, c, h: None):
        self.pool, self.gpu_memory, self.service_bytes = pool, gpu_memory, dict(service_bytes)
        self._restore, self._evict = restore, evict
        self.resident: collections.OrderedDict[tuple[str, Chunk], Any] = collections.OrderedDict()
        self.restores = self.evictions = self.hits = 0
        pool.cache = self
        for s, b in self.service_bytes.items():
            if b / pool.per_node > gpu_memory:
                raise ValueError(f"service {s!r} needs {b / pool.per_node:.3g} bytes per GPU even on "
                                 f"8 GPUs; gpu_memory is {gpu_memory:.3g}: raise gpu_memory")

    def per_gpu(self, service: str, chunk: Chunk) -> float:
        return self.service_bytes[service] / chunk[2]  # TP shards weights across the chunk

    def used(self, gpu: tuple[int, int]) -> float:
        return sum(self.per_gpu(s, c) for (s, c) in self.resident if gpu in gpus_of(c))

    def warm_units(self, service: str, chunk: Chunk) -> int:
        gpus = set(gpus_of(chunk))
        return sum(1 for (s, c) in self.resident if s == service for g in gpus_of(c) if g in gpus)

    def ensure(self, service: str, chunk: Chunk) -> tuple[Any, bool]:
        """The instance of ``service`` on ``chunk``, restoring it if needed; (handle, restored?)."""
        key = (service, chunk)
        if service not in self.service_bytes:
            raise KeyError(f"unknown GPU service {service!r}; registered: {sorted(self.service_bytes)}")
        if key in self.resident:
            self.resident.move_to_end(key)
            self.hits += 1
            return self.resident[key], False
        need = self.per_gpu(service, chunk)
        if need > self.gpu_memory:
            raise ValueError(f"service {service!r} needs {need:.3g} bytes per GPU on a {chunk[2]}-GPU "
                             f"chunk but gpu_memory is {self.gpu_memory:.3g}: use more units")
        for gpu in gpus_of(chunk):
            while self.used(gpu) + need > self.gpu_memory + 1e-6:
                victim = next(k for k in self.resident if gpu in gpus_of(k[1]))  # LRU first
                self._evict(victim[0], victim[1], self.resident.pop(victim))
                self.evictions += 1
        handle = self._restore(service, chunk)
        self.resident[key] = handle
        self.restores += 1
        return handle, True


class TorchServiceHost:
    """Real restore/evict of torch modules: host copies are state dicts, the device is a cap."""

    def __init__(self, factories: dict[str, Callable[[], Any]]):
        import torch

        self.factories = factories
        self.host: dict[str, dict[str, Any]] = {}
        self.bytes: dict[str, float] = {}
        for name, make in factories.items():
            module = make()
            self.host[name] = {k: v.detach().clone() for k, v in module.state_dict().items()}
            self.bytes[name] = float(sum(v.numel() * v.element_size() for v in self.host[name].values()))
        self._torch = torch
        self.restore_seconds: list[float] = []

    def restore(self, service: str, chunk: Chunk) -> Any:
        t0 = time.perf_counter()
        with self._torch.device("meta"):  # structure only: the weights come from the host copy
            module = self.factories[service]()
        module.load_state_dict({k: v.clone() for k, v in self.host[service].items()}, assign=True)
        module.eval()
        self.restore_seconds.append(time.perf_counter() - t0)
        return module

    def evict(self, service: str, chunk: Chunk, module: Any) -> None:
        del module  # the device copy goes; the host state dict stays

    def live_bytes(self, cache: DeviceCache) -> float:
        """Bytes of module parameters actually resident now (each instance counted once)."""
        return float(sum(p.numel() * p.element_size() for m in cache.resident.values()
                         for p in itertools.chain(m.parameters(), m.buffers())))
