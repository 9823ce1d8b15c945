"""Device topology: GPUs with compute/memory/HBM attributes and the latency/bandwidth between them.

This is HetRL's device graph G_D = (V_D, E_D, comp, mem, hbm, A, B) (HetRL §3.1, App. B.1).
Everything is stored in SI units: FLOP/s, bytes, bytes/s, seconds. A bandwidth of 0 means the two
devices have no direct link (e.g. edge GPUs that only reach their own region).

GPU types come from the hardware catalogue (rollart.hardware.HARDWARE) or the file's ``gpu_types``.
Devices of one GPU type on one node are interchangeable (same attributes, same links to everyone
else), so the planner works on *device classes* — (node, type) pairs — and counts per class.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rollart.config import ConfigError
from rollart.hardware import HARDWARE, HardwareSpec

GB = 1e9
GBIT = 1e9 / 8  # bytes per second in one Gbit/s


class TopologyError(ValueError):
    """The device topology is malformed or unusable; the message names the device/link and the fix."""


@dataclass(frozen=True)
class Device:
    id: str
    index: int
    spec: HardwareSpec
    node: str
    zone: str
    region: str


@dataclass(frozen=True)
class LinkSpec:
    latency_s: float
    bandwidth: float
    """bytes/s; 0 = no direct link."""


@dataclass
class LinkDefaults:
    """Link rules used when no explicit pair entry applies."""

    intra_node_latency_s: float = 5e-6
    """Latency between GPUs of one node (bandwidth is the smaller of the two GPUs' intra_gb_s)."""
    same_zone: LinkSpec = LinkSpec(latency_s=5e-5, bandwidth=100 * GBIT)
    """Different nodes in one zone (datacenter network, 100 Gbit/s)."""
    same_region: LinkSpec = LinkSpec(latency_s=1e-3, bandwidth=25 * GBIT)
    """Different zones of one region."""


class Topology:
    """Devices plus latency matrix A (s) and bandwidth matrix B (bytes/s)."""

    def __init__(self, devices: Sequence[Device], latency: np.ndarray, bandwidth: np.ndarray,
                 name: str = "custom", check_connected: bool = True):
        self.name = name
        self.devices = list(devices)
        n = len(self.devices)
        if n == 0:
            raise TopologyError("topology has no devices; list at least one under 'devices'")
        if latency.shape != (n, n) or bandwidth.shape != (n, n):
            raise TopologyError(f"latency/bandwidth matrices must be {n}x{n}, got "
                                f"{latency.shape} and {bandwidth.shape}")
        if (latency < 0).any() or (bandwidth < 0).any():
            raise TopologyError("latency and bandwidth must be >= 0")
        self.latency = latency.astype(float)
        self.bandwidth = bandwidth.astype(float)
        self.relayed = _relay_missing_links(self.latency, self.bandwidth)
        self.tflops = np.array([d.spec.tflops * 1e12 for d in self.devices])
        self.mem = np.array([d.spec.memory_gb * GB for d in self.devices])
        self.hbm = np.array([d.spec.hbm_gb_s * GB for d in self.devices])
        self._build_classes()
        if check_connected:
            self.check_connected()

    # --- device classes -------------------------------------------------------------------
    def _build_classes(self) -> None:
        """Group devices by (node, type); split a group if its members' links differ."""
        keys: dict[tuple, list[int]] = {}
        for d in self.devices:
            keys.setdefault((d.region, d.zone, d.node, d.spec.name), []).append(d.index)
        classes: list[list[int]] = []
        for members in keys.values():
            ref = members[0]
            others = [j for j in range(len(self.devices)) if j not in set(members)]
            same = all(np.array_equal(self.latency[m, others], self.latency[ref, others])
                       and np.array_equal(self.bandwidth[m, others], self.bandwidth[ref, others])
                       for m in members)
            classes.extend([members] if same else [[m] for m in members])
        classes.sort(key=lambda ms: ms[0])
        self.classes = classes
        self.class_of = np.zeros(len(self.devices), dtype=int)
        for c, ms in enumerate(classes):
            self.class_of[ms] = c
        self.class_capacity = np.array([len(ms) for ms in classes])
        reps = [ms[0] for ms in classes]
        k = len(classes)
        self.class_latency = np.zeros((k, k))
        self.class_bandwidth = np.zeros((k, k))
        for a in range(k):
            for b in range(k):
                i, j = reps[a], (classes[b][1] if a == b and len(classes[b]) > 1 else reps[b])
                self.class_latency[a, b] = self.latency[i, j]
                self.class_bandwidth[a, b] = self.bandwidth[i, j] if i != j else math.inf
        self.class_tflops = self.tflops[reps]
        self.class_mem = self.mem[reps]

    def class_label(self, c: int) -> str:
        d = self.devices[self.classes[c][0]]
        return f"{d.spec.name}@{d.node}"

    def check_connected(self) -> None:
        """Every device must reach every other one over links with bandwidth > 0."""
        n = len(self.devices)
        seen = {0}
        stack = [0]
        adj = (self.bandwidth > 0) & ~self.relayed
        while stack:
            i = stack.pop()
            for j in np.nonzero(adj[i])[0]:
                if int(j) not in seen:
                    seen.add(int(j))
                    stack.append(int(j))
        if len(seen) < n:
            cut = [self.devices[j].id for j in range(n) if j not in seen]
            raise TopologyError(
                f"devices {cut[:6]}{'...' if len(cut) > 6 else ''} cannot reach device "
                f"{self.devices[0].id!r}: add a link between their zones/regions or drop them")

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for d in self.devices:
            counts[d.spec.name] = counts.get(d.spec.name, 0) + 1
        regions = sorted({d.region for d in self.devices})
        return (f"{self.name}: {len(self.devices)} GPUs ("
                + ", ".join(f"{v}x{k}" for k, v in counts.items())
                + f") in {len(regions)} region(s)")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name,
                "devices": [{"id": d.id, "type": d.spec.name, "node": d.node, "zone": d.zone,
                             "region": d.region} for d in self.devices]}


def _relay_missing_links(lat: np.ndarray, bw: np.ndarray) -> np.ndarray:
    """Pairs without a direct link talk through other GPUs: fill them with the widest relay path
    (bandwidth = narrowest hop, latency = sum of hops). Returns the mask of relayed pairs; pairs that
    stay at bandwidth 0 have no path at all (see :meth:`Topology.check_connected`)."""
    n = len(bw)
    missing = (bw <= 0) & ~np.eye(n, dtype=bool)
    if not missing.any():
        return missing
    direct = ~missing
    eff_bw, eff_lat = bw.copy(), lat.copy()
    np.fill_diagonal(eff_bw, np.inf)
    for k in range(n):  # widest-path Floyd–Warshall
        cand_bw = np.minimum(eff_bw[:, k][:, None], eff_bw[k, :][None, :])
        cand_lat = eff_lat[:, k][:, None] + eff_lat[k, :][None, :]
        better = (~direct) & ((cand_bw > eff_bw) | ((cand_bw == eff_bw) & (cand_lat < eff_lat) & (cand_bw > 0)))
        eff_bw = np.where(better, cand_bw, eff_bw)
        eff_lat = np.where(better, cand_lat, eff_lat)
    np.fill_diagonal(eff_bw, 0.0)
    bw[missing], lat[missing] = eff_bw[missing], eff_lat[missing]
    return missing


# --- building topologies from rules -----------------------------------------------------------
def build(devices: Sequence[Device], region_links: dict[tuple[str, str], LinkSpec] | None = None,
          zone_links: dict[tuple[str, str], LinkSpec] | None = None,
          defaults: LinkDefaults | None = None, name: str = "custom",
          check_connected: bool = True) -> Topology:
    """Fill A and B from per-zone/per-region pair rules (zone entries win over region entries)."""
    defaults = defaults or LinkDefaults()
    region_links = {frozenset(k): v for k, v in (region_links or {}).items()}
    zone_links = {frozenset(k): v for k, v in (zone_links or {}).items()}
    n = len(devices)
    lat = np.zeros((n, n))
    bw = np.zeros((n, n))
    for a in devices:
        for b in devices:
            if a.index == b.index:
                bw[a.index, b.index] = math.inf
                continue
            if a.node == b.node:
                link = LinkSpec(defaults.intra_node_latency_s,
                                min(a.spec.intra_gb_s, b.spec.intra_gb_s) * GB)
            elif frozenset((a.zone, b.zone)) in zone_links and a.zone != b.zone:
                link = zone_links[frozenset((a.zone, b.zone))]
            elif a.zone == b.zone:
                link = defaults.same_zone
            elif a.region == b.region:
                link = defaults.same_region
            elif frozenset((a.region, b.region)) in region_links:
                link = region_links[frozenset((a.region, b.region))]
            else:
                raise TopologyError(f"no link given between regions {a.region!r} and {b.region!r}: "
                                    "add it under links.regions (bandwidth_gbps 0 = disconnected)")
            lat[a.index, b.index] = link.latency_s
            bw[a.index, b.index] = link.bandwidth
    np.fill_diagonal(bw, 0.0)
    return Topology(devices, lat, bw, name=name, check_connected=check_connected)


def make_devices(layout: Sequence[tuple[str, int, str, str, str]], gpus_per_node: int = 8,
                 specs: dict[str, HardwareSpec] | None = None) -> list[Device]:
    """Expand (type, count, node_prefix, zone, region) rows into devices, ``gpus_per_node`` per node;
    ``type`` names a GPU of rollart.hardware.HARDWARE or of ``specs``."""
    specs = {**{n: h for n, h in HARDWARE.items() if h.kind == "gpu"}, **(specs or {})}
    out: list[Device] = []
    for gpu, count, node_prefix, zone, region in layout:
        if gpu not in specs:
            raise TopologyError(f"unknown GPU type {gpu!r}; known: {sorted(specs)} "
                                "(or define it under gpu_types)")
        for k in range(count):
            out.append(Device(id=f"{node_prefix}-{k % gpus_per_node}" if count <= gpus_per_node
                              else f"{node_prefix}.{k // gpus_per_node}-{k % gpus_per_node}",
                              index=len(out), spec=specs[gpu],
                              node=f"{node_prefix}" if count <= gpus_per_node
                              else f"{node_prefix}.{k // gpus_per_node}",
                              zone=zone, region=region))
    return out


def load(path_or_dict: str | Path | dict) -> Topology:
    """Load a topology from a YAML/JSON file (or an already parsed dict).

    Format::

        name: my-cluster
        gpus_per_node: 8
        gpu_types: {X1: {tflops: 100, memory_gb: 32, hbm_gb_s: 900, intra_gb_s: 64}}
        devices:                       # rows expand into ``count`` GPUs, gpus_per_node per node
          - {type: A100, count: 16, node: a, zone: us-east-1a, region: us-east-1}
        links:
          same_zone: {latency_ms: 0.05, bandwidth_gbps: 100}
          same_region: {latency_ms: 1, bandwidth_gbps: 25}
          regions: [{a: us-east-1, b: us-east-2, latency_ms: 10, bandwidth_gbps: 5}]
          zones: [{a: edge, b: us-east-2a, bandwidth_gbps: 0}]    # 0 = no direct link
    """
    if isinstance(path_or_dict, dict):
        spec, where = path_or_dict, "topology"
    else:
        spec, where = _read_structured(Path(path_or_dict)), str(path_or_dict)
    try:
        return _from_dict(spec)
    except (KeyError, TypeError) as e:
        raise TopologyError(f"{where}: malformed topology ({e!r}); see rollart.planner.topology.load "
                            "for the format") from None


def _read_structured(path: Path) -> dict:
    if not path.exists():
        raise TopologyError(f"{path}: no such file; give a topology file or a preset name")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        data = parse_yaml(text, path)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise TopologyError(f"{path}: expected a mapping at the top level")
    return data


def parse_yaml(text: str, path: Path) -> Any:
    """The YAML ``text`` of ``path``: pyyaml comes with the planner extra; its absence is a one-line error."""
    try:
        import yaml
    except ImportError:
        raise ConfigError(f"{path} is a YAML file, which needs pyyaml: pip install -e \".[planner]\" "
                          "(or give the file as JSON)") from None
    return yaml.safe_load(text)


def _link(entry: dict, where: str) -> LinkSpec:
    if "bandwidth_gbps" not in entry:
        raise TopologyError(f"{where}: link needs bandwidth_gbps (and latency_ms)")
    return LinkSpec(latency_s=float(entry.get("latency_ms", 0.0)) / 1e3,
                    bandwidth=float(entry["bandwidth_gbps"]) * GBIT)


def _gpu_type(name: str, attrs: dict) -> HardwareSpec:
    try:
        spec = HardwareSpec(name=name, **attrs)
    except (ValueError, TypeError) as e:
        raise TopologyError(f"gpu_types: {e}") from None
    if spec.kind != "gpu":
        raise TopologyError(f"gpu_types.{name}: a topology holds GPUs only, got kind {spec.kind!r}")
    return spec


def _from_dict(spec: dict) -> Topology:
    specs = {name: _gpu_type(name, attrs) for name, attrs in spec.get("gpu_types", {}).items()}
    layout = [(row["type"], int(row.get("count", 1)), row.get("node", f"node{i}"),
               row.get("zone", "zone0"), row.get("region", "region0"))
              for i, row in enumerate(spec.get("devices", []))]
    devices = make_devices(layout, int(spec.get("gpus_per_node", 8)), specs)
    links = spec.get("links", {})
    defaults = LinkDefaults()
    if "same_zone" in links:
        defaults.same_zone = _link(links["same_zone"], "links.same_zone")
    if "same_region" in links:
        defaults.same_region = _link(links["same_region"], "links.same_region")
    regions = {(e["a"], e["b"]): _link(e, f"links.regions[{e['a']}-{e['b']}]")
               for e in links.get("regions", [])}
    zones = {(e["a"], e["b"]): _link(e, f"links.zones[{e['a']}-{e['b']}]")
             for e in links.get("zones", [])}
    return build(devices, regions, zones, defaults, name=spec.get("name", "custom"))


def replace_spec(topo: Topology, spec_for: dict[str, HardwareSpec]) -> list[Device]:
    """Devices of ``topo`` with their GPU spec swapped per type (used by the homogeneous baseline)."""
    return [dataclasses.replace(d, spec=spec_for[d.spec.name]) for d in topo.devices]


__all__ = ["Device", "LinkSpec", "LinkDefaults", "Topology", "TopologyError",
           "build", "make_devices", "load", "GB", "GBIT"]
