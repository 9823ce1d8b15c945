"""ResourceManager: declared hardware pools, role defaults, fallback, and the binding table.

    rm = ResourceManager({"H800": 8, "H20": 24, "cpu": 64, "serverless": "http://fc.example/reward"})
    b = rm.allocate("generate", owner="gen-0")            # -> H20 (bandwidth-optimized)
    b = rm.allocate("generate", hw="H800", owner="gen-1")  # explicit preference
    print(rm.binding_table())

A pool is a device count, a list of device ids (``{"H800": list(range(8))}`` as in RollArt
Listing 1), or for ``serverless`` an endpoint URL (or ``{"url": ..., "token": ...}``) with unbounded
capacity. When the preferred pool has no free device, ``allocate`` binds a compatible stand-in
(``hardware.fallbacks``) and notes it in the table instead of stalling; only when nothing compatible
is free does it raise ``ResourceExhaustedError``.
"""
from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rollart.distributed.hardware import ROLE_NEEDS, fallbacks, rank_for, spec

log = logging.getLogger("rollart.distributed")


class ResourceExhaustedError(RuntimeError):
    """No free device in the preferred pool nor in any compatible fallback pool."""


@dataclass
class Binding:
    owner: str
    role: str
    preferred: str
    hw_class: str
    devices: list = field(default_factory=list)
    note: str = ""

    @property
    def fell_back(self) -> bool:
        return self.hw_class != self.preferred

    def cuda_env(self) -> dict[str, str]:
        """``{"CUDA_VISIBLE_DEVICES": ...}`` for a process bound to GPU devices, so that ``cuda`` inside it is
        its own GPU(s); ``{}`` for a CPU or serverless class, or device ids that are not GPU ordinals (a
        plan's "H800:0"). Where this process itself sees only some GPUs, ids count within those."""
        if spec(self.hw_class).kind != "gpu" or not self.devices:
            return {}
        if not all(isinstance(d, int) or (isinstance(d, str) and d.isdigit()) for d in self.devices):
            return {}
        ids = [int(d) for d in self.devices]
        parent = os.environ.get("CUDA_VISIBLE_DEVICES")
        if parent is None:
            return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, ids))}
        visible = [v.strip() for v in parent.split(",") if v.strip()]
        if max(ids, default=0) >= len(visible):  # (an empty setting hides every GPU: the child inherits it)
            if visible:
                log.warning("%s: bound to GPU %d of %s but CUDA_VISIBLE_DEVICES=%r shows %d; it sees all of those",
                            self.owner, max(ids), self.hw_class, parent, len(visible))
            return {}
        return {"CUDA_VISIBLE_DEVICES": ",".join(visible[i] for i in ids)}


class ResourceManager:
    def __init__(self, *pools: dict, role_hw_class: dict[str, str] | None = None):
        """``pools``: one or more dicts ``{class: count | [device ids] | url}`` (merged).
        ``role_hw_class``: per-role default overrides, e.g. ``{"reward": "cpu"}``."""
        self.free: dict[str, list] = {}
        self.capacity: dict[str, int] = {}
        self.serverless_url: str | None = None
        self.serverless_token: str | None = None
        for group in pools:
            if not isinstance(group, dict):
                raise TypeError(f"ResourceManager pools must be dicts like {{'H800': 8}}, got {group!r}")
            for name, value in group.items():
                self._add_pool(name, value)
        self.role_hw_class = dict(role_hw_class or {})
        for role, hw in self.role_hw_class.items():
            if role not in ROLE_NEEDS:
                raise ValueError(f"unknown role {role!r} in role_hw_class; roles: {sorted(ROLE_NEEDS)}")
            spec(hw)
        self.bindings: list[Binding] = []

    def _add_pool(self, name: str, value: Any) -> None:
        s = spec(name)
        if name in self.capacity or (s.kind == "serverless" and self.serverless_url):
            raise ValueError(f"pool {name!r} declared twice")
        if s.kind == "serverless":
            url, token = (value.get("url"), value.get("token")) if isinstance(value, dict) else (value, None)
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"the serverless pool needs an http(s) URL, got {value!r}")
            self.serverless_url, self.serverless_token = url.rstrip("/"), token
            return
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ValueError(f"pool {name!r}: count must be >= 0, got {value}")
            devices = list(range(value))
        elif isinstance(value, (list, tuple, range)):
            devices = list(value)
        else:
            raise TypeError(f"pool {name!r}: expected a device count or a list of device ids, got {value!r}")
        self.free[name] = devices
        self.capacity[name] = len(devices)

    @classmethod
    def from_plan(cls, plan: dict) -> "ResourceManager":
        """Pools and role defaults from a placement plan ``{"groups": [{"role": r, "devices": [{"type": hw,
        "id": ...}, ...]}, ...]}``: each group's devices (by id when given) join their class's pool, and a
        role defaults to the class most of its devices have."""
        groups = plan.get("groups") if isinstance(plan, dict) else None
        if not isinstance(groups, list):
            raise ValueError("plan must be a dict with a 'groups' list")
        pools: dict[str, list] = {}
        by_role: dict[str, Counter] = {}
        for i, g in enumerate(groups):
            devices = g.get("devices", []) if isinstance(g, dict) else None
            if not isinstance(devices, list) or not all(isinstance(d, dict) and "type" in d for d in devices):
                raise ValueError(f"plan group {i} needs 'devices': [{{'type': ...}}, ...], got {g!r}")
            for d in devices:
                ids = pools.setdefault(d["type"], [])
                device_id = d.get("id", f"{d['type']}:{len(ids)}")
                if device_id not in ids:  # colocated groups may list the same device
                    ids.append(device_id)
                by_role.setdefault(g.get("role", ""), Counter())[d["type"]] += 1
        roles = {r: c.most_common(1)[0][0] for r, c in by_role.items() if r in ROLE_NEEDS}
        rm = cls(pools, role_hw_class=roles)
        if "serverless_url" in plan:
            rm._add_pool("serverless", plan["serverless_url"])
        return rm

    # -- placement -------------------------------------------------------------------------------
    def pools(self) -> list[str]:
        return list(self.capacity) + (["serverless"] if self.serverless_url else [])

    def default_hw_class(self, role: str) -> str:
        """The best declared class for a role: its override, else by what the role needs."""
        if role in self.role_hw_class:
            return self.role_hw_class[role]
        need = ROLE_NEEDS.get(role)
        if need is None:
            raise ValueError(f"unknown role {role!r}; roles: {sorted(ROLE_NEEDS)}")
        ranked = rank_for(need, self.pools())
        if ranked:
            return ranked[0]
        if need == "serverless":  # reward without a serverless endpoint runs locally
            return "cpu"
        gpus = rank_for("compute", self.pools())
        return gpus[0] if gpus else "cpu"

    def allocate(self, role: str, hw: str | None = None, count: int = 1, owner: str = "") -> Binding:
        preferred = hw or self.default_hw_class(role)
        spec(preferred)
        for candidate in [preferred, *fallbacks(preferred, self.pools())]:
            if spec(candidate).kind == "serverless":
                if self.serverless_url:
                    b = Binding(owner, role, preferred, candidate, [], self.serverless_url)
                    break
                continue
            free = self.free.get(candidate, [])
            if len(free) >= count:
                devices, self.free[candidate] = free[:count], free[count:]
                note = "" if candidate == preferred else f"fallback: {preferred} exhausted or not declared"
                b = Binding(owner, role, preferred, candidate, devices, note)
                break
        else:
            raise ResourceExhaustedError(
                f"cannot place {owner or role!r} ({role}): need {count} x {preferred} and no compatible pool has "
                f"{count} free; free now: {self.free_summary()}. Declare more devices or lower the worker count")
        self.bindings.append(b)
        return b

    def release(self, binding: Binding) -> None:
        """Return a binding's devices to their pool (a worker died for good or was stopped)."""
        if binding in self.bindings:
            self.bindings.remove(binding)
            if binding.hw_class in self.free:
                self.free[binding.hw_class].extend(binding.devices)

    def free_summary(self) -> dict[str, int]:
        return {name: len(devs) for name, devs in self.free.items()}

    def binding_table(self) -> str:
        rows = [("worker", "role", "preferred", "bound", "devices", "note")]
        for b in self.bindings:
            devs = ",".join(map(str, b.devices)) if b.devices else "-"
            rows.append((b.owner, b.role, b.preferred, b.hw_class, devs, b.note))
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        pools = ", ".join(f"{n} {len(self.free[n])}/{self.capacity[n]} free" for n in self.capacity)
        if self.serverless_url:
            pools += f", serverless {self.serverless_url}"
        return "\n".join(lines + [f"pools: {pools}"])

    def __repr__(self) -> str:
        return f"ResourceManager({self.free_summary()}, serverless={self.serverless_url!r})"
