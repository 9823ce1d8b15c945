"""The four network scenarios of HetRL §5.1 as topology presets.

GPUs come in nodes of 8 of one type (default mix: 24 A100, 24 L40S, 16 L4 — the paper's testbed).
The paper's measured inter-region matrices (its Figure 3) are not in its text, so the multi-country and
multi-continent matrices here are *synthetic*: the delay grows linearly with great-circle distance
between the named cities, scaled into the ranges the paper states (5–30 ms / 1.9–5.0 Gbit/s in Europe,
5–60 ms / 0.9–5.0 Gbit/s across Europe and the US), and bandwidth falls linearly as delay rises.
"""
from __future__ import annotations

import math
from typing import Sequence

from .topology import (GBIT, LinkDefaults, LinkSpec, Topology, TopologyError, build, make_devices)

DEFAULT_MIX: tuple[tuple[str, int], ...] = (("A100", 24), ("L40S", 24), ("L4", 16))

_CITIES = {  # (lat, lon) of the AWS regions the paper names
    "virginia": (38.9, -77.4), "ohio": (40.0, -83.0), "paris": (48.9, 2.4),
    "stockholm": (59.3, 18.1), "london": (51.5, -0.1), "ireland": (53.3, -6.3),
    "spain": (41.6, -0.9), "zurich": (47.4, 8.5), "frankfurt": (50.1, 8.7), "milan": (45.5, 9.2),
}
EUROPE = ("paris", "stockholm", "london", "ireland", "spain", "zurich", "frankfurt", "milan")
CONTINENTS = ("virginia", "ohio", "paris", "stockholm", "london", "ireland", "frankfurt", "milan")

SCENARIOS = ("single-region", "multi-region-hybrid", "multi-country", "multi-continent")


def _km(a: str, b: str) -> float:
    (la1, lo1), (la2, lo2) = _CITIES[a], _CITIES[b]
    p1, p2, dl = math.radians(la1), math.radians(la2), math.radians(lo2 - lo1)
    c = math.sin(p1) * math.sin(p2) + math.cos(p1) * math.cos(p2) * math.cos(dl)
    return 6371.0 * math.acos(max(-1.0, min(1.0, c)))


def _region_matrix(regions: Sequence[str], delay_ms: tuple[float, float],
                   gbps: tuple[float, float]) -> dict[tuple[str, str], LinkSpec]:
    pairs = [(a, b) for i, a in enumerate(regions) for b in regions[i + 1:]]
    dists = {p: _km(*p) for p in pairs}
    lo, hi = min(dists.values()), max(dists.values())
    out = {}
    for p, d in dists.items():
        x = (d - lo) / (hi - lo) if hi > lo else 0.0
        out[p] = LinkSpec(latency_s=(delay_ms[0] + x * (delay_ms[1] - delay_ms[0])) / 1e3,
                          bandwidth=(gbps[1] - x * (gbps[1] - gbps[0])) * GBIT)
    return out


def _nodes(mix: Sequence[tuple[str, int]], gpus_per_node: int) -> list[tuple[str, int]]:
    """(type, gpus) per node, in type order."""
    nodes = []
    for gpu, count in mix:
        for start in range(0, count, gpus_per_node):
            nodes.append((gpu, min(gpus_per_node, count - start)))
    return nodes


def scenario(name: str, mix: Sequence[tuple[str, int]] = DEFAULT_MIX, gpus_per_node: int = 8) -> Topology:
    """Build one of :data:`SCENARIOS` for a GPU mix like ``[("A100", 24), ("L40S", 24), ("L4", 16)]``."""
    nodes = _nodes(mix, gpus_per_node)
    if name == "single-region":
        # No latency/bandwidth controls: one zone, datacenter network between nodes.
        sites = [("us-east-1a", "virginia")] * len(nodes)
        region_links: dict = {}
        zone_links: dict = {}
    elif name == "multi-region-hybrid":
        # Ohio and Virginia; part of Virginia is edge that links only to (core) Virginia at 1 Gbit/s.
        cycle = [("virginia-core", "virginia"), ("ohio", "ohio"), ("virginia-edge", "virginia")]
        sites = [cycle[i % 3] for i in range(len(nodes))]
        region_links = {("ohio", "virginia"): LinkSpec(10e-3, 5 * GBIT)}
        zone_links = {("virginia-edge", "virginia-core"): LinkSpec(2e-3, 1 * GBIT),
                      ("virginia-edge", "ohio"): LinkSpec(0.0, 0.0)}
    elif name in ("multi-country", "multi-continent"):
        regions = EUROPE if name == "multi-country" else CONTINENTS
        delay, gbps = ((5, 30), (1.9, 5.0)) if name == "multi-country" else ((5, 60), (0.9, 5.0))
        sites = [(regions[i % len(regions)], regions[i % len(regions)]) for i in range(len(nodes))]
        region_links = _region_matrix(regions, delay, gbps)
        zone_links = {}
    else:
        raise TopologyError(f"unknown topology preset {name!r}; presets: {list(SCENARIOS)} "
                            "(or give a YAML/JSON file)")
    layout = [(gpu, count, f"n{i}-{gpu}", zone, region)
              for i, ((gpu, count), (zone, region)) in enumerate(zip(nodes, sites))]
    devices = make_devices(layout, gpus_per_node)
    return build(devices, region_links, zone_links, LinkDefaults(), name=name)


def parse_mix(text: str) -> list[tuple[str, int]]:
    """``"A100:24,L40S:24,L4:16"`` -> [("A100", 24), ...]."""
    out = []
    for part in text.split(","):
        gpu, _, count = part.partition(":")
        if not count.isdigit():
            raise TopologyError(f"bad GPU mix entry {part!r}: write TYPE:COUNT, e.g. A100:24")
        out.append((gpu.strip(), int(count)))
    return out
