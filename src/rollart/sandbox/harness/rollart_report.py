"""pytest plugin run inside the sandbox: reports each test's outcome under a secret nonce.

Loaded with ``-p rollart_report``. It reads the nonce from stdin at import time (before any code
under test is imported) and writes ``<nonce> <outcome> <nodeid>`` lines to a private dup of the
original stdout when pytest finishes. A test process that exits early, crashes or prints look-alike lines
without the nonce therefore reports nothing that counts. (Code under test shares the interpreter,
so a deliberately adversarial program could still dig the nonce out of memory; see envs/swe/README.)
"""
import os
import sys

_NONCE = sys.stdin.readline().strip()
_OUT = os.dup(1)
_OUTCOMES: dict = {}


def pytest_runtest_logreport(report):
    previous = _OUTCOMES.get(report.nodeid, "passed")
    if report.failed:
        _OUTCOMES[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped and previous == "passed":
        _OUTCOMES[report.nodeid] = "skipped"
    else:
        _OUTCOMES.setdefault(report.nodeid, previous)


def pytest_unconfigure(config):  # the very last hook: after the terminal summary
    lines = "\n" + "".join(f"{_NONCE} {outcome} {nodeid}\n" for nodeid, outcome in _OUTCOMES.items())
    os.write(_OUT, lines.encode("utf-8", "replace"))
