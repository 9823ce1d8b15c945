"""``python -m rollart.faults --quick`` end to end (a real 3-step run under env faults, and the sandbox suite's
quick cases): one line per figure, the summary last, and the figures that hold today read ok. In the default run
(~25 s): the suite drives the product's interfaces (its ledger trainer subclasses the torch trainer), so a change
that breaks it fails here."""
import re
import subprocess
import sys


SUMMARY = re.compile(r"^(\w+=(\d+|\d+/\d+|fail\(\S+\)|n/a\(\S+\)))( \w+=(\d+|\d+/\d+|fail\(\S+\)|n/a\(\S+\)))*$")


def test_quick_suite_prints_its_figures(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rollart.faults", "--quick", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    lines = out.stdout.strip().splitlines()
    assert SUMMARY.match(lines[-1]), out.stdout + out.stderr
    figures = dict(item.split("=", 1) for item in lines[-1].split())
    assert list(figures) == ["env_exc_lost", "env_hang_deadlocks", "sandbox_contained"]
    assert figures["env_exc_lost"] == "0" and figures["env_hang_deadlocks"] == "0", out.stdout
    contained, _, total = figures["sandbox_contained"].partition("/")
    assert figures["sandbox_contained"].startswith("n/a(") or contained == total, out.stdout
    assert lines[-2].startswith("wall_s=") and "load_1m=" in lines[-2]
    assert sum(line.startswith(("ok ", "FAIL", "n/a")) for line in lines) == 3
    assert (tmp_path / "faults.log").is_file() and (tmp_path / "env_exc_hang" / "ledger.jsonl").is_file()
    all_ok = not figures["sandbox_contained"].startswith("n/a(")  # the env figures are 0 (asserted above)
    assert out.returncode == (0 if all_ok else 1)


def test_only_rejects_an_unknown_fault_in_one_line():
    out = subprocess.run([sys.executable, "-m", "rollart.faults", "--only", "trainer_kil"], capture_output=True,
                         text=True, timeout=120)
    from rollart.faults.cli import FAULTS  # the suite's kinds, whichever it has
    assert out.returncode != 0 and out.stderr.strip().splitlines() == [
        f"error: --only trainer_kil: no such fault; choose from {', '.join(FAULTS)} (or a figure name such as "
        "env_exc_lost)"]
