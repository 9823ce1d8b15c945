"""Accounting of one run: what entered the sample buffer against what was trained or dropped with a reason.

``lost = accepted - trained - evicted - buffered``, where ``accepted``, ``evicted`` (by reason) and ``buffered``
are the buffer's own counters and ``trained`` is counted on the trainer's side — distinct trajectory ids in the
ledger ``rollart.faults.trainer_ledger`` writes — so a batch taken from the buffer that never reached a train
step reads as lost, not as trained. Trained ids that the run's reward function never scored, and ids trained
twice, are counted too.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


def read_ledger(path: Path) -> list[dict]:
    """The ledger's records; a last line cut by a kill is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


@dataclass
class Accounts:
    accepted: int
    """Trajectories the sample buffer accepted (whole scored groups)."""
    evicted: dict[str, int]
    """Trajectories the buffer dropped, by reason."""
    buffered: int
    """Still in the buffer when the run ended."""
    trained_by_buffer: int
    """Trajectories the buffer handed out for training (its own counter)."""
    trained_ids: set[str]
    """Distinct trajectory ids the trainer trained (from its ledger)."""
    trained_twice: int = 0
    """Ledger entries for an id already trained (a batch trained again)."""
    unscored: int = 0
    """Trained ids the run's reward function never scored, or trained with a reward other than the one it gave."""
    trainer_pids: list[int] = field(default_factory=list)
    """Trainer processes that wrote to the ledger, in order of appearance."""
    rolled_back: int = 0
    """Trajectories trained at versions later than a checkpoint a restarted trainer reloaded (training undone)."""

    @property
    def trained(self) -> int:
        return len(self.trained_ids)

    @property
    def dropped(self) -> int:
        return sum(self.evicted.values())

    @property
    def lost(self) -> int:
        """Accepted trajectories neither trained, nor dropped with a reason, nor still buffered."""
        return max(0, self.accepted - self.trained - self.dropped - self.buffered)

    @property
    def overcounted(self) -> int:
        """More trained + dropped + buffered than accepted: trained ids that never entered the buffer."""
        return max(0, self.trained + self.dropped + self.buffered - self.accepted)

    def describe(self) -> str:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.evicted.items())) or "none"
        text = (f"accepted {self.accepted} = trained {self.trained} (trainer's ledger; buffer says "
                f"{self.trained_by_buffer}) + dropped {self.dropped} ({reasons}) + buffered {self.buffered}"
                f" + lost {self.lost}")
        if self.overcounted:
            text += f"; {self.overcounted} trained that never entered the buffer"
        if self.trained_twice:
            text += f"; {self.trained_twice} trained twice"
        if self.unscored:
            text += f"; {self.unscored} trained without their reward"
        return text


def account(buffer_stats: dict, ledger: list[dict], scores: dict[str, float] | None) -> Accounts:
    """Accounts from the buffer's ``stats()``, the trainer's ledger records and (if given) the scores the
    run's reward function returned, by trajectory id."""
    evicted = {k.split("/", 1)[1]: int(v) for k, v in buffer_stats.items() if k.startswith("evicted/")}
    trained: dict[str, float] = {}
    twice = 0
    pids: list[int] = []
    by_version: dict[int, list[str]] = {}
    rolled_back = 0
    for rec in ledger:
        if rec.get("pid") not in pids:
            pids.append(rec.get("pid"))
        if rec.get("event") == "load":
            undone = [v for v in by_version if v > rec["version"]]
            rolled_back += sum(len(by_version.pop(v)) for v in undone)
        if rec.get("event") != "train":
            continue
        by_version[rec["version"]] = rec["ids"]
        for tid, reward in zip(rec["ids"], rec["rewards"]):
            twice += tid in trained
            trained[tid] = reward
    unscored = 0
    if scores is not None:
        unscored = sum(1 for tid, r in trained.items() if tid not in scores or abs(scores[tid] - r) > 1e-6)
    return Accounts(accepted=int(buffer_stats.get("accepted", 0)), evicted=evicted,
                    buffered=int(buffer_stats.get("buffered", 0)),
                    trained_by_buffer=int(buffer_stats.get("trained", 0)), trained_ids=set(trained),
                    trained_twice=twice, unscored=unscored, trainer_pids=pids, rolled_back=rolled_back)
