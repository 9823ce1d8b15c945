"""What a soak (:mod:`rollart.faults.soak`) measured: the faults injected and how soon training went on after each
(``Injection``), the run's accounts, its rows skipped or trained twice (``row_counts``), its processes' resident
memory (``rss_reading``), and the report's lines (``SoakReport``)."""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from rollart.faults.procs import actor_processes

KINDS = ("kill_inference_worker", "kill_trainer", "kill_weight_store", "kill_env_host", "env_exceptions",
         "env_hangs", "reward_endpoint_down", "malformed_frames", "corrupt_checkpoint", "disk_full_checkpoint")
"""The faults a soak draws from, each as likely."""


@dataclass
class Injection:
    kind: str
    at_s: float
    """Seconds into the run."""
    step: int
    did: str
    recovery_s: float | None = None
    """Seconds from the fault to the next training step (None: none before the next fault or the end)."""


@dataclass
class SoakReport:
    seconds: float
    injections: list[Injection] = field(default_factory=list)
    skipped_injections: list[str] = field(default_factory=list)
    """Draws that found nothing to inject (e.g. the process was restarting), with why."""
    steps: int = 0
    completed: bool = False
    error: str = ""
    accounts: Any = None
    rows_skipped: int = 0
    rows_repeated: int = 0
    rows_detail: str = ""
    rss: dict = field(default_factory=dict)
    """name -> (pid, KiB at the baseline, pid, KiB at the end)."""
    final_success: float | None = None

    @property
    def accepted_lost(self) -> int:
        return self.accounts.lost if self.accounts is not None else -1

    def rss_growth(self) -> tuple[float | None, str]:
        """(largest growth in percent among processes alive at both readings, a note on the others)."""
        same = {n: (a, b) for n, (pa, a, pb, b) in self.rss.items() if pa == pb and a}
        other = sorted(n for n in self.rss if n not in same)
        growth = max(((b - a) / a * 100 for a, b in same.values()), default=None)
        note = f"compared: {', '.join(sorted(same)) or 'none'}"
        return growth, note + (f"; restarted or gone since the baseline: {', '.join(other)}" if other else "")

    def lines(self) -> list[str]:
        out = []
        by_kind: dict[str, list[Injection]] = {}
        for inj in self.injections:
            by_kind.setdefault(inj.kind, []).append(inj)
        for kind in KINDS:
            got = by_kind.get(kind, [])
            rec = [i.recovery_s for i in got if i.recovery_s is not None]
            median = f"{statistics.median(rec):.1f} s" if rec else "-"
            worst = f"{max(rec):.1f} s" if rec else "-"
            out.append(f"{kind:<22} injected {len(got):>3}  recovered {len(rec):>3}  recovery median {median}, "
                       f"max {worst}")
        if self.skipped_injections:
            out.append(f"not injected ({len(self.skipped_injections)}): " + "; ".join(self.skipped_injections[:5]))
        out.append(f"run: {self.steps} steps; {'completed' if self.completed else 'ENDED: ' + self.error}")
        if self.accounts is not None:
            out.append(f"accounts: {self.accounts.describe()}")
        out.append(f"rows: {self.rows_detail}")
        growth, note = self.rss_growth()
        for name, (pa, a, pb, b) in sorted(self.rss.items()):
            out.append(f"rss {name:<18} {a / 1024:7.1f} MiB (pid {pa}) -> {b / 1024:7.1f} MiB (pid {pb})")
        out.append(f"rss growth: {'-' if growth is None else f'{growth:.1f} %'} ({note})")
        return out

    def last_line(self) -> str:
        growth, _ = self.rss_growth()
        success = "n/a" if self.final_success is None else f"{self.final_success:.2f}"
        return (f"faults_injected={len(self.injections)} accepted_lost={self.accepted_lost} "
                f"rows_skipped={self.rows_skipped} rows_repeated={self.rows_repeated} "
                f"rss_growth_pct={'n/a' if growth is None else f'{growth:.1f}'} final_success={success}")

    @property
    def ok(self) -> bool:
        """Nothing lost, skipped or repeated, and the run went on to its end."""
        return (self.completed and self.accepted_lost == 0 and self.rows_skipped == 0 and self.rows_repeated == 0
                and not (self.accounts is not None and self.accounts.overcounted))


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` in KiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_reading() -> dict[str, tuple[int, int]]:
    """name -> (pid, KiB) for this coordinator and every actor process of its run."""
    reading = {"coordinator": (os.getpid(), rss_kib(os.getpid()))}
    for proc in actor_processes():
        reading[proc.name] = (proc.pid, rss_kib(proc.pid))
    return reading


def row_counts(order: Any) -> tuple[int, int, str]:
    """(rows skipped, rows trained twice in one epoch, one line) of a task's RowOrder: a row of a finished epoch
    counts as skipped when it was neither trained in it nor is still outstanding or dealt again."""
    pending = {(row, e) for row, epochs in order.outstanding.items() for e in epochs} | set(order.again)
    repeated = skipped = 0
    for epoch in range(order.epoch + 1):
        trained = order.trained_in(epoch)
        repeated += len(trained) - len(set(trained))
        if epoch < order.epoch:
            skipped += sum(1 for row in range(order.n) if row not in trained and (row, epoch) not in pending)
    line = (f"{order.n} rows, epoch {order.epoch} (+{order.dealt} dealt of the next); {len(order.trained)} groups "
            f"trained; {len(pending)} outstanding or to deal again; skipped {skipped}, trained twice {repeated}")
    return skipped, repeated, line
