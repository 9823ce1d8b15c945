"""The sandbox's hostile-command suite (``tests/sandbox/test_security.py``), run under pytest in its own
process, and what it contained: one case is one hostile command in one isolation mode; it is contained when
its test passed (the command failed, leaked nothing, left the host and the other episode intact). A mode
the machine cannot run is skipped by the suite, saying why, and counted apart. :func:`sandbox` reads the
report as the fault suite's ``sandbox_contained`` figure."""
from __future__ import annotations

import asyncio
import re
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rollart.faults.figures import Figure, failed, not_available

SUITE = Path("tests") / "sandbox" / "test_security.py"
QUICK_CASES = ("tcp_to_host_loopback", "read_shadow", "write_host_canary", "symlink_shadow", "kill_host_parent",
               "memory_bomb_one_shot")
"""The --quick subset: network, a host secret, a host write, a symlink escape, killing the parent, memory."""
CASE = re.compile(r"test_hostile_command_contained\[(?P<mode>[^-\]]+)-(?P<case>[^\]]+)\]")


def find_suite(start: Path | None = None) -> Path | None:
    """The suite in this checkout (next to src/), or under the current folder; None when installed without it."""
    candidates = [Path(__file__).resolve().parents[3] / SUITE, Path.cwd() / SUITE]
    if start is not None:
        candidates.insert(0, start / SUITE)
    return next((p for p in candidates if p.is_file()), None)


@dataclass
class SandboxReport:
    contained: Counter = field(default_factory=Counter)
    """Mode -> hostile commands contained."""
    escaped: dict[str, list[str]] = field(default_factory=dict)
    """Mode -> the cases that were not contained."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Mode -> why the suite skipped it."""

    @property
    def total(self) -> int:
        return sum(self.contained.values()) + sum(len(v) for v in self.escaped.values())

    def describe(self) -> str:
        modes = sorted(set(self.contained) | set(self.escaped))
        parts = [f"{mode} {self.contained[mode]}/{self.contained[mode] + len(self.escaped.get(mode, []))}"
                 + (f" (escaped: {', '.join(self.escaped[mode][:5])})" if self.escaped.get(mode) else "")
                 for mode in modes]
        parts += [f"{mode} skipped: {why}" for mode, why in sorted(self.skipped.items())]
        return "; ".join(parts) or "no case ran"


def parse_junit(path: Path) -> SandboxReport:
    report = SandboxReport()
    for case in ET.parse(path).getroot().iter("testcase"):
        match = CASE.fullmatch(case.get("name", ""))
        if match is None:
            continue
        mode, name = match["mode"], match["case"]
        outcome = {child.tag for child in case}
        if "skipped" in outcome:
            report.skipped[mode] = (case.find("skipped").get("message") or "skipped").removeprefix("Skipped: ")
        elif outcome & {"failure", "error"}:
            report.escaped.setdefault(mode, []).append(name)
        else:
            report.contained[mode] += 1
    return report


async def run_suite(suite: Path, junit: Path, quick: bool, timeout_s: float) -> tuple[SandboxReport | None, str]:
    """Run the hostile-command cases (all, or QUICK_CASES); returns the report, or None and why not."""
    select = "hostile" if not quick else "hostile and (" + " or ".join(QUICK_CASES) + ")"
    junit.unlink(missing_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite), "-k", select,
        f"--junitxml={junit}", cwd=str(suite.parents[2]), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, f"the suite did not finish within {timeout_s:.0f} s"
    if not junit.is_file():
        tail = out.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return None, f"pytest wrote no report (exit {proc.returncode}): {tail[0]}"
    return parse_junit(junit), ""


async def sandbox(workdir: Path, quick: bool) -> list[Figure]:
    """The project's hostile-command suite in every isolation mode this machine runs."""
    started = time.monotonic()
    suite = find_suite()
    if suite is None:
        return [not_available("sandbox_contained", "tests/sandbox/test_security.py not found: run from a checkout")]
    report, why = await run_suite(suite, workdir / "sandbox-junit.xml", quick, timeout_s=600.0)
    seconds = time.monotonic() - started
    if report is None:
        return [failed("sandbox_contained", why, why, seconds)]
    subset = f"the {len(QUICK_CASES)} --quick cases" if quick else "every case"
    if report.total == 0:
        return [not_available("sandbox_contained", f"no isolation mode ran: {report.describe()}", seconds)]
    contained = sum(report.contained.values())
    return [Figure("sandbox_contained", f"{contained}/{report.total}", contained == report.total,
                   f"{subset} of {suite.relative_to(suite.parents[2])} per mode: {report.describe()}", seconds,
                   {"contained": contained, "total": report.total})]
