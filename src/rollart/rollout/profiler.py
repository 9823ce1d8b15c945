"""Online hardware profiler: learns which hardware class should serve each task tag (``hw_affinity=auto``).

Every finished request is one observation ``(tag, hw_class, prefill_tokens, decode_tokens, seconds)``:
the tokens its worker computed (prompt tokens not served from the prefix cache; generated tokens) and the
wall time the worker took for it (from send to result, batching with other requests included). The proxy
records one per request; the simulator (``rollart.sim.hwsim``) records the same for its requests.

Decision rule, in three steps:

1) **cost** of a tag on a class: seconds per token of the tag's *dominant phase* (decode when it generated
   at least as many tokens as it prefilled, else prefill), over the recent observations (exponentially
   decayed, ``window`` observations of that pair). Dividing by the dominant phase's tokens compares the same
   kind of work across classes: a prefill-heavy tag is judged by its prefill speed, a decode-heavy one by
   its decode speed;
2) **saving** of a tag on a class: how many seconds one of its trajectories saves there against the mean
   over the classes, ``(mean_c cost_{t,c} - cost_{t,c}) * dominant tokens per trajectory`` (tokens and
   trajectory counts decayed over the last ``traj_window`` trajectories);
3) **mapping**: (tag, class) pairs in order of saving, largest first, each tag to the first class that
   still has room for it, where a class's room is its share of the workers (give or take ``slack``, so
   sampling noise in the shares does not decide) and a tag takes its share of the trajectories. A tag that
   fits nowhere goes to the class it overfills least (relative to that class's share). So a tag goes where it gains most, as far as capacity allows: one class does not take every tag
   it is fastest at while the other sits idle, and the longest trajectories - which set the step time -
   claim the class that shortens them first.

A proposal is made once every seen tag has ``min_samples`` observations on every class. Tags not in the
current mapping (new ones, or all of them before the first proposal) go to any worker, which is how each
tag gets measured on every class. **Hysteresis**: the mapping is revised every ``min_interval``
observations, and a proposal that differs from the mapping in force replaces it only when the previous
revision proposed the same (two in a row; the first mapping is adopted at once); so the mapping follows a
change of the task mix but does not flap on noise.

Limits: a request's wall time includes whatever else its worker runs, so a tag measured while sharing a class
with heavy work of another tag looks slower there than it would alone (a decode sharing steps with long
prefills); costs of a (tag, class) pair no longer served keep their last value (nothing re-explores); task
shares follow a change of the mix over about ``traj_window`` trajectories.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class _Pair:
    seconds: float = 0.0
    tokens: float = 0.0
    samples: int = 0


class HardwareProfiler:
    """Per (task tag, hardware class) cost estimates and the ``hw_affinity`` mapping they imply."""

    def __init__(self, workers: dict[str, int], window: int = 200, traj_window: int = 4096, min_samples: int = 8,
                 min_interval: int = 50, slack: float = 0.2, max_trajectories: int = 100_000) -> None:
        """``workers``: hardware class -> number of workers (its capacity share)."""
        if not workers or any(n < 1 for n in workers.values()):
            raise ValueError(f"HardwareProfiler needs at least one worker per class, got {workers!r}")
        self.workers = dict(workers)
        self.decay = 1.0 - 1.0 / window
        self.traj_decay = 1.0 - 1.0 / traj_window
        self.min_samples, self.min_interval, self.max_trajectories = min_samples, min_interval, max_trajectories
        self.slack = slack
        self.pairs: dict[tuple[str, str], _Pair] = {}
        self.tokens: dict[str, float] = {}
        """tag -> decayed dominant-phase tokens."""
        self.trajectories: dict[str, float] = {}
        """tag -> decayed count of trajectories (same decay as ``tokens``)."""
        self.phases: dict[str, tuple[float, float]] = {}
        """tag -> decayed (prefill, decode) tokens: which phase dominates."""
        self.seen: dict[str, None] = {}
        """Recent trajectory ids (insertion order; the oldest forgotten beyond max_trajectories)."""
        self.mapping: dict[str, str] = {}
        """The mapping in force: tag -> class. Tags not in it go to any worker."""
        self.pending: dict[str, str] | None = None
        self.observations = 0
        self.changes = 0

    # ---------------------------------------------------------------- observations

    def record(self, tag: str, hw_class: str, prefill_tokens: int, decode_tokens: int, seconds: float,
               trajectory: str = "") -> bool:
        """Account one finished request of ``trajectory`` (an id; '' counts each request as one trajectory);
        returns True when it changed ``mapping`` (see ``revise``)."""
        if hw_class not in self.workers or seconds <= 0 or prefill_tokens + decode_tokens <= 0:
            return False
        pre, dec = self.phases.get(tag, (0.0, 0.0))
        pre, dec = pre * self.decay + prefill_tokens, dec * self.decay + decode_tokens
        self.phases[tag] = (pre, dec)
        dominant = max(decode_tokens if dec >= pre else prefill_tokens, 1)
        pair = self.pairs.setdefault((tag, hw_class), _Pair())
        pair.seconds = pair.seconds * self.decay + seconds
        pair.tokens = pair.tokens * self.decay + dominant
        pair.samples += 1
        new = not trajectory or trajectory not in self.seen
        if new:  # shares and tokens per trajectory are decayed per trajectory, costs per observation
            for t in self.tokens:
                self.tokens[t] *= self.traj_decay
                self.trajectories[t] *= self.traj_decay
            if trajectory:
                self.seen[trajectory] = None
                if len(self.seen) > self.max_trajectories:
                    del self.seen[next(iter(self.seen))]
        self.tokens[tag] = self.tokens.get(tag, 0.0) + dominant
        self.trajectories[tag] = self.trajectories.get(tag, 0.0) + float(new)
        self.observations += 1
        return self.observations % self.min_interval == 0 and self.revise()

    def cost(self, tag: str, hw_class: str) -> float | None:
        """Seconds per dominant-phase token of ``tag`` on ``hw_class`` (None: not measured enough)."""
        pair = self.pairs.get((tag, hw_class))
        if pair is None or pair.samples < self.min_samples:
            return None
        return pair.seconds / pair.tokens

    # ---------------------------------------------------------------- decision

    def propose(self) -> dict[str, str] | None:
        """The mapping the rule above picks now, or None while some tag lacks samples on some class."""
        tags = sorted(t for t in self.tokens if self.trajectories[t] > 0)
        classes = sorted(self.workers)
        if not tags or any(self.cost(t, c) is None for t in tags for c in classes):
            return None
        total = sum(self.trajectories[t] for t in tags)
        share = {t: self.trajectories[t] / total for t in tags}
        room = {c: n / sum(self.workers.values()) for c, n in self.workers.items()}
        savings = []
        for t in tags:
            costs = {c: self.cost(t, c) for c in classes}
            mean = sum(costs.values()) / len(costs)
            per_traj = self.tokens[t] / self.trajectories[t]
            savings += [((mean - costs[c]) * per_traj, t, c) for c in classes]
        used = dict.fromkeys(classes, 0.0)
        mapping: dict[str, str] = {}
        for _, t, c in sorted(savings, reverse=True):
            if t not in mapping and used[c] + share[t] <= room[c] * (1.0 + self.slack):
                mapping[t] = c
                used[c] += share[t]
        for t in sorted((t for t in tags if t not in mapping), key=lambda t: -share[t]):
            c = min(classes, key=lambda c: (used[c] + share[t]) / room[c])
            mapping[t] = c
            used[c] += share[t]
        return mapping

    def revise(self) -> bool:
        """Adopt the proposal if the previous revision proposed the same (see the module docstring)."""
        proposal = self.propose()
        if proposal is None or proposal == self.mapping:
            self.pending = None
            return False
        if self.mapping and proposal != self.pending:
            self.pending = proposal  # first sighting: adopt only if the next revision agrees
            return False
        self.mapping, self.pending = proposal, None
        self.changes += 1
        log.info("hw_affinity=auto: %s", self.describe())
        return True
    def describe(self) -> str:
        """The mapping in force and its costs, in one line."""
        if not self.mapping:
            return "no mapping yet (every task on any worker while profiling)"
        parts = []
        for tag, hw in sorted(self.mapping.items()):
            costs = ", ".join(f"{c} {self.cost(tag, c) * 1e3:.3g}" for c in sorted(self.workers))
            parts.append(f"{tag}->{hw} (ms/token {costs})")
        return "; ".join(parts)

    def metrics(self) -> dict[str, float]:
        """Scalars for tensorboard: cost per (tag, class) in ms/token, and how often the mapping changed."""
        out = {f"rollout/hw_cost_ms/{tag}/{hw}": self.cost(tag, hw) * 1e3
               for (tag, hw) in self.pairs if self.cost(tag, hw) is not None}
        out["rollout/hw_affinity_changes"] = float(self.changes)
        return out
