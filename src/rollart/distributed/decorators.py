"""Method declarations a Cluster turns into dispatch (RollArt §5.2, Listing 1).

The decorators only attach a ``Dispatch`` record to the function; the function itself is unchanged,
so a Worker stays a plain class that runs anywhere (in a test, in an actor process).

* ``@register(mode="execute_all")`` — broadcast to every live worker, results aggregated
  (``aggregate="list" | "sum" | "mean" | "concat" | callable``; default list in rank order).
  ``mode="one"`` — one worker, the one with the fewest calls in flight; ``"round_robin"`` — rotate.
* ``@hw_mapping(hw_affinity={"FrozenLake": "H800", "default": "H20"})`` — route each call by its
  ``task`` argument to a worker on that hardware class; if none is live, to a compatible class
  (``hardware.fallbacks``), then to any live worker.
* ``@register_serverless(attribute="reward_proxy", url=...)`` — ``cluster.method(...)`` runs as a
  stateless function behind an HTTP endpoint instead of on a worker (the url defaults to the
  ResourceManager's ``serverless`` pool; without one the method runs on a worker, "local"). Every
  worker also gets ``self.<attribute>``: an async callable for the same function.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

MODES = ("execute_all", "one", "round_robin")
AGGREGATES = ("list", "sum", "mean", "concat")


@dataclass(frozen=True)
class Dispatch:
    kind: str
    """'register' | 'hw_mapping' | 'serverless'"""
    mode: str = "one"
    aggregate: Any = "list"
    hw_affinity: dict = field(default_factory=dict)
    attribute: str = ""
    url: str | None = None
    token: str | None = None

    def preferred_hw_class(self, task: str | None) -> str | None:
        return self.hw_affinity.get(task, self.hw_affinity.get("default")) if task is not None else \
            self.hw_affinity.get("default")


def _attach(fn: Callable, d: Dispatch) -> Callable:
    if getattr(fn, "__rollart_dispatch__", None) is not None:
        raise TypeError(f"{fn.__qualname__} already has a rollart dispatch decorator; use one per method")
    fn.__rollart_dispatch__ = d
    return fn


def register(mode: str = "execute_all", aggregate: Any = "list") -> Callable[[Callable], Callable]:
    if mode not in MODES:
        raise ValueError(f"register(mode=...) must be one of {MODES}, got {mode!r}")
    if not (callable(aggregate) or aggregate in AGGREGATES):
        raise ValueError(f"aggregate must be one of {AGGREGATES} or a callable, got {aggregate!r}")
    return lambda fn: _attach(fn, Dispatch("register", mode=mode, aggregate=aggregate))


def hw_mapping(hw_affinity: dict[str, str]) -> Callable[[Callable], Callable]:
    from rollart.distributed.hardware import spec

    if not isinstance(hw_affinity, dict) or not hw_affinity:
        raise ValueError("hw_mapping needs hw_affinity={task: hardware class, ...}, e.g. {'default': 'H20'}")
    for hw in hw_affinity.values():
        spec(hw)  # unknown class -> KeyError naming the known ones
    return lambda fn: _attach(fn, Dispatch("hw_mapping", hw_affinity=dict(hw_affinity)))


def register_serverless(attribute: str = "", url: str | None = None, *, serverless_url: str | None = None,
                        token: str | None = None) -> Callable[[Callable], Callable]:
    """``serverless_url`` is accepted as an alias of ``url`` (the paper's spelling)."""
    url = url or serverless_url
    if url is not None and not url.startswith(("http://", "https://")):
        raise ValueError(f"register_serverless url must be http(s)://..., got {url!r}")
    if attribute and not attribute.isidentifier():
        raise ValueError(f"register_serverless attribute must be an identifier, got {attribute!r}")
    return lambda fn: _attach(fn, Dispatch("serverless", attribute=attribute, url=url and url.rstrip("/"),
                                           token=token))


def dispatch_table(cls: type) -> dict[str, Dispatch]:
    """Decorated public methods of a Worker class -> their Dispatch."""
    table = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        d = getattr(getattr(cls, name, None), "__rollart_dispatch__", None)
        if isinstance(d, Dispatch):
            table[name] = d
    return table
