"""Grading Python code by running tests against it in the sandbox, the HumanEval way; the ``code_tests`` verifier.

A row carries its tests as HumanEval does: ``test`` is Python that defines ``check(candidate)`` and
``entry_point`` names the function to pass to it (or, without ``entry_point``, ``test`` is plain code such as
asserts, run after the answer). The answer's code is the first fenced block (```python ... ```) of the text, or
the whole text. If it defines the entry point it follows the row's ``prompt`` (a full definition overrides the
prompt's stub); otherwise it is the body that continues the prompt (HumanEval's completion format).

The program runs in a :class:`rollart.sandbox.Sandbox` through the sandbox's ``run_python.py`` harness, which
prints a nonce only after the program ran to its end, so code that exits early (``exit(0)``, ``os._exit``)
cannot pass. There is no fallback to running unsandboxed: where no isolation mode works the sandbox refuses
with its own one-line reason (:class:`rollart.sandbox.SandboxUnavailable`). The HumanEval env
(``envs/humaneval``) grades with the same functions.
"""
from __future__ import annotations

import re
import secrets

from rollart.sandbox import Sandbox, SandboxConfig

CODE_SANDBOX = SandboxConfig(timeout_s=10.0, disk_mb=16)
"""Limits of the sandbox ``code_tests`` runs a row's tests in (the HumanEval env's defaults)."""
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_DEFINES_CHECK = re.compile(r"^def\s+check\s*\(", re.M)


def extract_code(text: str) -> str:
    """The first fenced code block of ``text`` (```python, ```py or bare ```), or the whole text."""
    m = _FENCE.search(text)
    return m.group(1) if m else text


def build_program(answer: str, *, test: str, entry_point: str = "", prompt: str = "") -> str:
    """The program that runs ``test`` against the answer's code (see the module docstring for the rules)."""
    code = extract_code(answer)
    if entry_point and re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.M):
        body = prompt + "\n" + code  # a full definition overrides the prompt's stub
    else:
        body = prompt + code
    call = f"\n\ncheck({entry_point})\n" if entry_point else "\n"
    return f"{body}\n\n{test}{call}"


def check_program(sandbox: Sandbox, program: str, timeout_s: float | None = None) -> tuple[bool, str]:
    """Run ``program`` in the sandbox: (True iff it ran to its end, what it printed with its exit status)."""
    sandbox.write_file("solution.py", program.encode("utf-8"))
    nonce = secrets.token_hex(16)
    p = sandbox.paths
    r = sandbox.run(["python3", "-s", f"{p.harness}/run_python.py", "solution.py"], timeout_s=timeout_s,
                    stdin=(nonce + "\n").encode())
    passed = r.exit_code == 0 and f"{nonce} passed" in r.output
    shown = r.observation().replace(f"{nonce} passed", "").strip()
    return passed, shown


def run_code_tests(text: str, *, test: str, entry_point: str | None = "", prompt: str | None = "",
                   sandbox: SandboxConfig | None = None) -> tuple[bool, str]:
    """Run a row's tests against the code in ``text`` in a fresh sandbox: (all passed, the test output)."""
    if not isinstance(text, str):
        raise ValueError(f"code_tests: the answer must be text, got {type(text).__name__}")
    entry_point, prompt = entry_point or "", prompt or ""  # a row's empty columns
    if not isinstance(test, str) or not test.strip():
        raise ValueError("code_tests: the row has no tests: give a 'test' column (Python that defines "
                         "check(candidate), or asserts)")
    if not isinstance(entry_point, str) or not isinstance(prompt, str):
        raise ValueError(f"code_tests: the row's entry_point and prompt must be text, got "
                         f"{type(entry_point).__name__} and {type(prompt).__name__}")
    if not entry_point and _DEFINES_CHECK.search(test):
        raise ValueError("code_tests: the row's test defines check(candidate) but the row has no 'entry_point' "
                         "column naming the function to check, so nothing would be tested")
    if sandbox is not None and not isinstance(sandbox, SandboxConfig):
        raise TypeError(f"code_tests: sandbox= must be a SandboxConfig set by the program, not a row's "
                        f"{type(sandbox).__name__}")
    with Sandbox(sandbox or CODE_SANDBOX, name="code_tests") as box:
        return check_program(box, build_program(text, test=test, entry_point=entry_point, prompt=prompt))


def code_tests(text: str, reference: str = "", *, test: str = "", entry_point: str | None = "",
               prompt: str | None = "", sandbox: SandboxConfig | None = None, **extra) -> float:
    """1.0 if the code in ``text`` passes all of the row's tests in the sandbox, else 0.0.

    ``reference`` (e.g. a canonical solution) is not used: the tests are the ground truth. The row's ``test``,
    ``entry_point`` and ``prompt`` come as extras; ``sandbox`` (a SandboxConfig, default :data:`CODE_SANDBOX`)
    only from the program. Raises SandboxUnavailable where no isolation works, ValueError for a row without
    usable tests."""
    passed, _ = run_code_tests(text, test=test, entry_point=entry_point, prompt=prompt, sandbox=sandbox)
    return 1.0 if passed else 0.0
