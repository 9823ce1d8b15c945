"""Whether a model's answer equals a reference, by math-verify, in bounded time from any thread.

math-verify bounds each parse and each comparison with ``signal.alarm``, which only a process's main thread may
use: from another thread its timeout raises ValueError, and with the timeout off a pathological answer such as
``\\boxed{9^{9^{9^{9}}}}`` compares for hours. So :func:`math_equal` calls math-verify with its own timeouts
when it runs on the main thread (an endpoint worker, the coordinator), and from any other thread (an env host's
env threads) hands the same call to a helper process, ``python -m rollart.rewards.math_equal``, that runs it on
its main thread. Helpers start on first use, are reused, number at most ``MAX_HELPERS`` at once, and one that
overruns its deadline anyway (a long computation inside C) is killed and replaced.

A timeout raises TimeoutError (the trajectory is dropped with the reason counted, not scored 0); a reference
math-verify cannot read raises ValueError; an answer it cannot read is simply not equal.
"""
from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import select
import subprocess
import sys
import threading

TIMEOUT_S = 3
"""math-verify's limit, in whole seconds (``signal.alarm``), on each parse and each comparison."""
WARM_UP_TIMEOUT_S = 120
"""The limit on :func:`warm_up`'s fixed pair (its cost is the process's one-time set-up, not the expression)."""
MAX_OPERATIONS = 6
"""Most timed operations of one call: two parses and up to four comparisons (each side parses to at most a
sympy expression and its string)."""
HELPER_GRACE_S = 5.0
"""A helper's deadline beyond ``MAX_OPERATIONS x timeout`` (the pipe and the process's own overhead)."""
HELPER_STARTUP_S = 120.0
"""Seconds a helper may take to import math-verify and sympy (a loaded machine is slow at it)."""
MAX_HELPERS = max(1, min(4, os.cpu_count() or 1))
"""Helper processes at once; callers beyond that wait for one."""


def _reference_text(reference: str) -> str:
    """math-verify reads bare LaTeX (``\\frac{1}{2}``, ``2^{10}``) only between delimiters: add them unless the
    reference already has some."""
    return reference if any(d in reference for d in ("$", "\\(", "\\[", "\\boxed")) else f"${reference}$"


@functools.cache
def warm_up() -> None:
    """math-verify's first parse and first comparison in a process set up sympy and its LaTeX grammar (0.35 s on an
    idle core, over the 3-s limit on a loaded 2-core machine, measured): do that once on a fixed pair, under a
    generous limit, so that the one-time cost never counts against an answer (whose score would be dropped)."""
    from math_verify import parse, verify
    verify(parse("$1/2$", parsing_timeout=WARM_UP_TIMEOUT_S),
           parse(r"\boxed{\frac{2}{4}}", parsing_timeout=WARM_UP_TIMEOUT_S), timeout_seconds=WARM_UP_TIMEOUT_S)


def compare(text: str, reference: str, timeout_s: int = TIMEOUT_S) -> bool:
    """math-verify's verdict on this thread (the main thread only: its timeouts are signals)."""
    from math_verify import parse, verify  # imported on first use: endpoint workers that never call it stay light
    from math_verify.errors import TimeoutException

    warm_up()
    try:
        gold = parse(_reference_text(reference), parsing_timeout=timeout_s, raise_on_error=True)
    except TimeoutException:
        raise TimeoutError(f"math_verify: reading the reference took over {timeout_s}s") from None
    except Exception as e:  # noqa: BLE001 - whatever math-verify raised, the row's reference is at fault
        why = " ".join(str(e).split())[:200]
        raise ValueError(f"math_verify: cannot read the row's reference {reference[:80]!r} ({why})") from None
    if not gold:
        raise ValueError(f"math_verify: the row's reference {reference[:80]!r} holds no answer math-verify can read")
    try:
        answer = parse(text, parsing_timeout=timeout_s, raise_on_error=True)
    except TimeoutException:
        raise TimeoutError(f"math_verify: reading the answer took over {timeout_s}s "
                           "(a pathological expression?)") from None
    except Exception:  # noqa: BLE001 - model text math-verify cannot parse holds no answer
        return False
    for g in gold:
        for a in answer:
            try:
                if verify(g, a, timeout_seconds=timeout_s, raise_on_error=True):
                    return True
            except TimeoutException:
                raise TimeoutError(f"math_verify: comparing the answer with the reference took over {timeout_s}s "
                                   "(a pathological expression?)") from None
            except Exception:  # noqa: BLE001 - a pair sympy cannot compare is not equal
                continue
    return False


class _Helper:
    """One helper process, spoken to in JSON lines (request: text, reference, timeout_s)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "rollart.rewards.math_equal"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        try:
            self._reply(HELPER_STARTUP_S, "starting")
        except BaseException:
            self.kill()
            raise

    def call(self, text: str, reference: str, timeout_s: int, deadline_s: float) -> dict:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"text": text, "reference": reference, "timeout_s": timeout_s}) + "\n")
            self.proc.stdin.flush()
        except OSError as e:
            raise RuntimeError(f"math_verify: helper process is gone ({e}; exit code {self.proc.poll()})") from None
        return self._reply(deadline_s, "comparing")

    def _reply(self, within_s: float, doing: str) -> dict:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], within_s)
        if not ready:
            raise TimeoutError(f"math_verify: helper process still {doing} after {within_s:g}s; killed it")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"math_verify: helper process exited with code {self.proc.wait()} while {doing}")
        return json.loads(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class HelperPool:
    """Helper processes for calls from threads other than the main one (see the module docstring)."""

    def __init__(self, most: int = MAX_HELPERS) -> None:
        self._idle: list[_Helper] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(most)
        self._started = False

    def call(self, text: str, reference: str, timeout_s: int = TIMEOUT_S, deadline_s: float | None = None) -> bool:
        """:func:`compare` in a helper; a helper that overruns ``deadline_s`` (default: every operation timing
        out, plus :data:`HELPER_GRACE_S`) is killed and the call raises TimeoutError."""
        if deadline_s is None:
            deadline_s = MAX_OPERATIONS * timeout_s + HELPER_GRACE_S
        with self._slots:
            with self._lock:
                helper = self._idle.pop() if self._idle else None
            if helper is None:
                helper = self._start()
            try:
                reply = helper.call(text, reference, timeout_s, deadline_s)
            except BaseException:
                helper.kill()  # its state is unknown: never reuse it
                raise
            with self._lock:
                self._idle.append(helper)
        if "error" in reply:
            raise {"TimeoutError": TimeoutError, "ValueError": ValueError}.get(reply["error"], RuntimeError)(
                reply["message"])
        return bool(reply["equal"])

    def _start(self) -> _Helper:
        with self._lock:
            if not self._started:  # registered on first use, so that importing this module changes nothing
                self._started = True
                atexit.register(self.close)
        return _Helper()

    def close(self) -> None:
        """Stop the idle helpers (a busy one ends when its caller kills it or its pipe closes)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for helper in idle:
            helper.kill()


_POOL = HelperPool()


def math_equal(text: str, reference: str, timeout_s: int = TIMEOUT_S) -> bool:
    """True when math-verify finds the answer in ``text`` equal to ``reference``, from any thread, in bounded time."""
    if importlib.util.find_spec("math_verify") is None:
        raise ImportError("math_verify needs the math-verify package: pip install math-verify")
    if threading.current_thread() is threading.main_thread():
        return compare(text, reference, timeout_s)
    return _POOL.call(text, reference, timeout_s)


def main() -> None:
    """The helper process: read requests on stdin, answer each on stdout, until stdin closes."""
    out = sys.stdout
    sys.stdout = sys.stderr  # anything a library prints must not corrupt the protocol
    warm_up()  # the cold start (imports, sympy's set-up) happens before "ready", outside any call's deadline

    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply: dict = {"equal": compare(request["text"], request["reference"], request["timeout_s"])}
        except (TimeoutError, ValueError) as e:
            reply = {"error": type(e).__name__, "message": str(e)}
        except Exception as e:  # noqa: BLE001 - reported to the caller, the helper lives on
            reply = {"error": "RuntimeError", "message": f"math_verify: {type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
