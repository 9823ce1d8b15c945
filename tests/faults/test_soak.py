"""The soak (python -m rollart.faults --soak): its row and memory accounting on their own, then the command itself
for real, two minutes in the default run (a fault about every 15 s) and ten minutes as a slow test."""
import re
import subprocess
import sys

import pytest

from rollart.faults.soak_report import KINDS, SoakReport, row_counts
from rollart.rollout.row_order import RowOrder


def _train_all(order, epochs):
    for _ in range(epochs * order.n):
        order.settle(order.next())


def test_rows_of_whole_epochs_trained_once_count_as_neither_skipped_nor_repeated():
    order = RowOrder(5, seed=1)
    _train_all(order, 2)
    order.give_back(order.next())  # a failed group: its row is dealt again, not skipped
    held = order.next()            # a group in flight at the end: outstanding, not skipped
    assert row_counts(order)[:2] == (0, 0)
    order.settle(held)
    assert row_counts(order)[:2] == (0, 0)


def test_a_row_trained_twice_or_never_is_counted():
    order = RowOrder(4, seed=0)
    _train_all(order, 1)
    order.trained.append(order.trained[0])  # epoch 0: one row twice
    order.trained = [t for t in order.trained if t != order.trained[1]]  # ... and another never
    order.next()  # into epoch 1: epoch 0 is finished
    skipped, repeated, line = row_counts(order)
    assert (skipped, repeated) == (1, 1) and "skipped 1, trained twice 1" in line


def test_memory_growth_compares_only_processes_alive_at_both_readings():
    report = SoakReport(60.0, rss={"coordinator": (10, 1000, 10, 1050), "gen-0": (11, 2000, 12, 9000),
                                   "trainer-0": (13, 3000, 13, 3300)})
    growth, note = report.rss_growth()
    assert growth == pytest.approx(10.0) and "restarted or gone since the baseline: gen-0" in note
    assert "rss_growth_pct=10.0" in report.last_line()


def _soak(tmp_path, seconds, every, seed=0):
    out = subprocess.run([sys.executable, "-m", "rollart.faults", "--soak", str(seconds), "--fault-every",
                          str(every), "--seed", str(seed), "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=seconds + 900)
    figures = dict(item.split("=", 1) for item in out.stdout.strip().splitlines()[-1].split())
    return out, figures


def test_two_minute_soak_loses_nothing(tmp_path):
    out, f = _soak(tmp_path, 120, 15)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert int(f["faults_injected"]) >= 4, out.stdout[-3000:]
    assert f["accepted_lost"] == f["rows_skipped"] == f["rows_repeated"] == "0", out.stdout[-3000:]
    injected = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+injected\s+(\d+)", out.stdout, re.MULTILINE)}
    assert set(injected) == set(KINDS) and sum(n > 0 for n in injected.values()) >= 2, out.stdout[-3000:]


@pytest.mark.slow
def test_ten_minute_soak_loses_nothing_keeps_memory_flat_and_learns(tmp_path):
    out, f = _soak(tmp_path, 600, 60, seed=1)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert int(f["faults_injected"]) >= 6
    assert f["accepted_lost"] == f["rows_skipped"] == f["rows_repeated"] == "0", out.stdout[-3000:]
    assert f["rss_growth_pct"] != "n/a" and float(f["rss_growth_pct"]) <= 10, out.stdout[-3000:]
    assert float(f["final_success"]) >= 0.9, out.stdout[-3000:]
