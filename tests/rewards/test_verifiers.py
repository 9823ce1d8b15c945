"""Verifiers: math equivalences and non-answers, exact/regex/numeric/format, code in the sandbox, user verifiers, threads, a real endpoint."""
import asyncio
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from envs.humaneval.scripted import canonical_answer, exit_early_answer, wrong_answer
from rollart.loader import LoadError
from rollart.rewards.client import RewardCallError, RewardClient
from rollart.rewards.code_verifier import code_tests
from rollart.rewards.config import RewardConfig
from rollart.rewards.math_equal import HelperPool
from rollart.rewards.registry import BUILTIN_FUNCTIONS, FunctionRegistry
from rollart.rewards.verifiers import (BUILTINS, exact_match, format_reward, math_verify, numeric, regex_match,
                                       verifier_of, with_format)
from rollart.sandbox import SandboxUnavailable, resolve_mode
from tests.humaneval.problems import problems_or_skip
from tests.sandbox.fixtures import no_isolation, sandbox_isolation  # noqa: F401 (fixtures)

from . import user_verifiers

USER = user_verifiers.__name__  # how pytest put tests/ on sys.path decides the module's name
HANG_GUARD_S = 300  # a call still running after this has hung: fail instead of waiting for ever
POWER_TOWER = r"The answer is \boxed{9^{9^{9^{9}}}}"  # math-verify compares this for hours without a timeout
ADD = {"prompt": 'def add(a, b):\n    """Return a + b."""\n',
       "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
       "entry_point": "add"}


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


# -- math_verify -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["1/2", "0.5", r"\frac{1}{2}", r"\boxed{0.5}", r"$\frac{1}{2}$",
                                  r"Halving 1 gives \boxed{\frac{1}{2}}.", "The answer is 2/4.",
                                  r"First I got 3, then fixed it: \boxed{0.50}"])
@pytest.mark.parametrize("reference", ["1/2", "0.5", r"\frac{1}{2}"])
def test_math_equivalences_score_one(text, reference):
    assert math_verify(text, reference) == 1.0


@pytest.mark.parametrize("text", ["", "I cannot solve this.", "0.6", r"\boxed{1/3}", "The half is 1/2, so 3",
                                  r"\boxed{}"])
def test_math_non_answers_and_wrong_answers_score_zero(text):
    assert math_verify(text, "1/2") == 0.0


def test_math_latex_and_symbolic_answers():
    assert math_verify(r"\boxed{2^{10}}", "1024") == 1.0
    assert math_verify(r"so $\sqrt{8}$", r"2\sqrt{2}") == 1.0
    assert math_verify(r"\boxed{x^2 + 2x + 1}", "(x+1)^2") == 1.0
    assert math_verify("The total is 1,234 apples", "1234") == 1.0
    assert math_verify(r"\boxed{1234}", 1234) == 1.0 and math_verify(r"\boxed{1233}", 1234) == 0.0  # a number


def test_math_bad_rows_and_answers_say_what_is_wrong():
    with pytest.raises(ValueError) as e:
        math_verify(r"\boxed{1}", "")
    assert "no reference answer" in one_line(e)
    with pytest.raises(ValueError) as e:
        math_verify(r"\boxed{1}", "$$")
    assert "reference '$$' holds no answer" in one_line(e)
    with pytest.raises(ValueError) as e:
        math_verify(None, "1")
    assert "answer must be text, got NoneType" in one_line(e)


# -- exact, regex, numeric, format -----------------------------------------------------------------------------
def test_exact_match_normalises_case_whitespace_and_end_punctuation_only():
    assert exact_match("  The   EIFFEL tower. ", "the eiffel tower") == 1.0
    assert exact_match('"**Paris**!"', "paris") == 1.0
    assert exact_match(r"I think it is \boxed{ Paris }.", "Paris") == 1.0  # the boxed answer, not the text
    assert exact_match("Ｐａｒｉｓ", "paris") == 1.0  # NFKC: full-width letters
    assert exact_match("The answer is Paris", "Paris") == 0.0  # no box: the whole text is the answer
    assert exact_match("-3", "3") == 0.0 and exact_match("(a)", "a") == 0.0 and exact_match("5%", "5") == 0.0
    assert exact_match("Paris, France", "Paris") == 0.0


def test_regex_match_on_the_final_answer():
    assert regex_match(r"Final: \boxed{PARIS}", r"(?i)^paris$") == 1.0
    assert regex_match("It is 42 or so", r"\b42\b") == 1.0
    assert regex_match("It is 142", r"\b42\b") == 0.0
    assert regex_match("colour", "", pattern=r"colou?r") == 1.0  # a pattern column wins over the reference
    with pytest.raises(ValueError) as e:
        regex_match("x", "(unclosed")
    assert "pattern '(unclosed' does not compile" in one_line(e)
    with pytest.raises(ValueError) as e:
        regex_match("x", "")
    assert "no reference answer" in one_line(e)


def test_numeric_last_number_within_tolerance():
    assert numeric("first 5, finally 7", "7") == 1.0 and numeric("first 5, finally 7", "5") == 0.0
    assert numeric("about 3.1416", "3.14159265") == 0.0  # default rel_tol 1e-6
    assert numeric("about 3.1416", "3.14159265", rel_tol=1e-4) == 1.0
    assert numeric("7.4", "7", abs_tol=0.5) == 1.0 and numeric("7.6", "7", abs_tol="0.5") == 0.0
    assert numeric("1,234 apples", "1234") == 1.0 and numeric("3/4", "0.75") == 1.0
    assert numeric(r"\boxed{1e-3} (from 12 steps)", "0.001") == 1.0  # boxed first
    assert numeric("-2", "2") == 0.0 and numeric("no numbers here", "0") == 0.0
    assert numeric("10", "10", rel_tol=None, abs_tol=None) == 1.0  # a row's empty tolerance columns
    with pytest.raises(ValueError) as e:
        numeric("1", "about one")
    assert "reference 'about one' is not a number" in one_line(e)
    with pytest.raises(ValueError) as e:
        numeric("1", "1", rel_tol="-1")
    assert "rel_tol='-1' must be a number >= 0" in one_line(e)


def test_format_reward_and_with_format():
    assert format_reward(r"so \boxed{3}") == 1.0 and format_reward("so 3") == 0.0
    assert format_reward("<answer>3</answer>", format_pattern=r"<answer>.*</answer>") == 1.0
    scored = with_format(math_verify, 0.1)
    assert scored(r"\boxed{0.5}", "1/2") == pytest.approx(1.1)
    assert scored(r"\boxed{0.7}", "1/2") == pytest.approx(0.1)
    assert scored("0.5", "1/2") == 1.0
    tagged = with_format(exact_match, 0.5, pattern=r"^<answer>")
    assert tagged("<answer>x", "x") == 0.5 and tagged(r"<answer>\boxed{x}", "x") == 1.5
    assert scored.__name__ == "math_verify_with_format"
    with pytest.raises(ValueError) as e:
        with_format(math_verify, -1)
    assert "weight=-1" in one_line(e)


# -- by name or module:function --------------------------------------------------------------------------------
def test_builtins_by_name_and_in_the_endpoints_default_set():
    assert set(BUILTINS) == {"math_verify", "exact_match", "regex_match", "numeric", "code_tests", "format_reward"}
    assert all(verifier_of(name) is fn for name, fn in BUILTINS.items())
    served = FunctionRegistry(BUILTIN_FUNCTIONS)
    assert set(served.functions) == set(BUILTINS) | {"math_reward"}
    assert served.get("math_verify") is math_verify
    RewardConfig(serverless=True, function="code_tests")  # a run may name any built-in without reward.functions


def test_user_verifier_loads_and_bad_ones_give_one_line():
    contains = verifier_of(f"{USER}:contains_reference")
    assert contains("It is PARIS", "paris") == 1.0
    assert verifier_of(f"{USER}:math_with_format")(r"\boxed{1/2}", "0.5") == pytest.approx(1.1)
    with pytest.raises(LoadError) as e:
        verifier_of("no_such_package.mod:fn")
    assert "verifier 'no_such_package.mod:fn': cannot import module" in one_line(e)
    with pytest.raises(LoadError) as e:
        verifier_of(f"{USER}:missing")
    assert "has no 'missing'" in one_line(e)
    with pytest.raises(ValueError) as e:
        verifier_of(f"{USER}:NOT_A_FUNCTION")
    assert "names a int, not a function" in one_line(e)
    with pytest.raises(ValueError) as e:
        verifier_of("math_verfy")
    message = one_line(e)
    assert "did you mean 'math_verify'?" in message and all(name in message for name in BUILTINS)


# -- bounded time from threads ---------------------------------------------------------------------------------
def test_math_verify_own_timeout_refuses_threads():
    """Why math_verify hands thread calls to a helper: math-verify's signal timeout raises off the main thread."""
    from math_verify import parse, verify

    def call():
        return verify(parse("$1$"), parse("$1$"))

    with ThreadPoolExecutor(1) as pool, pytest.raises(ValueError, match="threaded environment"):
        pool.submit(call).result(timeout=HANG_GUARD_S)


def test_pathological_answer_from_a_worker_thread_times_out_in_one_line():
    with ThreadPoolExecutor(2) as pool:
        hard = pool.submit(math_verify, POWER_TOWER, "5")
        easy = pool.submit(math_verify, r"\boxed{\frac{3}{6}}", "0.5")
        with pytest.raises(TimeoutError) as e:
            hard.result(timeout=HANG_GUARD_S)
        assert "comparing the answer with the reference took over" in one_line(e)
        assert easy.result(timeout=HANG_GUARD_S) == 1.0
        assert pool.submit(math_verify, "1/2", "0.5").result(timeout=HANG_GUARD_S) == 1.0  # helpers still serve


def test_pathological_answer_on_the_main_thread_times_out():
    with pytest.raises(TimeoutError) as e:
        math_verify(POWER_TOWER, "5")
    assert "took over" in one_line(e)


def test_helper_past_its_deadline_is_killed_and_replaced():
    pool = HelperPool(most=1)
    try:
        with pytest.raises(TimeoutError) as e:
            pool.call(POWER_TOWER, "5", timeout_s=60, deadline_s=1.0)  # the helper's own timeout comes too late
        assert "helper process still comparing after 1s; killed it" in one_line(e)
        assert pool.call("1/2", "0.5") is True
    finally:
        pool.close()


# -- code in the sandbox ---------------------------------------------------------------------------------------
def test_code_tests_rows_without_usable_tests_say_so():
    with pytest.raises(ValueError) as e:
        code_tests("def add(a, b): return a + b", "")
    assert "no tests: give a 'test' column" in one_line(e)
    with pytest.raises(ValueError) as e:
        code_tests("def add(a, b): return a + b", "", test=ADD["test"])
    assert "no 'entry_point' column" in one_line(e)
    with pytest.raises(TypeError) as e:
        code_tests("x", "", test="assert True", sandbox={"mode": "rlimit"})
    assert "must be a SandboxConfig set by the program" in one_line(e)


@pytest.mark.usefixtures("sandbox_isolation")
def test_code_tests_pass_right_code_and_fail_wrong_code_in_the_sandbox():
    right = "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n"
    assert code_tests(right, "", **ADD) == 1.0
    assert code_tests("    return a + b\n", "", **ADD) == 1.0  # a body continuing the prompt
    assert code_tests("```python\ndef add(a, b):\n    return a - b\n```", "", **ADD) == 0.0
    assert code_tests("```python\nimport os\ndef add(a, b):\n    return 0\nos._exit(0)\n```", "", **ADD) == 0.0
    assert code_tests("I cannot write this.", "", **ADD) == 0.0
    assert code_tests("def sq(x):\n    return x * x\n", "", test="assert sq(3) == 9\n", task_id="t1") == 1.0
    assert code_tests("def sq(x):\n    return x + x\n", "", test="assert sq(3) == 9\n") == 0.0


@pytest.mark.usefixtures("sandbox_isolation")
def test_code_tests_grade_humaneval_rows_as_the_env_does():
    for problem in problems_or_skip()[:3]:
        row = {"test": problem.test, "entry_point": problem.entry_point, "prompt": problem.prompt}
        assert code_tests(canonical_answer(problem), problem.canonical_solution, **row) == 1.0
        assert code_tests(wrong_answer(problem), problem.canonical_solution, **row) == 0.0
        assert code_tests(exit_early_answer(problem), problem.canonical_solution, **row) == 0.0


@pytest.mark.usefixtures("no_isolation")
def test_code_tests_without_isolation_refuse_with_the_sandboxs_reason():
    with pytest.raises(SandboxUnavailable) as e:
        code_tests("def add(a, b):\n    return a + b\n", "", **ADD)
    assert "no isolation works here" in one_line(e)


# -- through a real endpoint -----------------------------------------------------------------------------------
async def test_verifiers_through_a_real_endpoint_process():
    top = Path(user_verifiers.__file__).resolve().parents[USER.count(".")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(top), os.environ.get("PYTHONPATH")]))}
    functions = ",".join([*BUILTIN_FUNCTIONS, f"{USER}:contains_reference"])
    proc = subprocess.Popen([sys.executable, "-m", "rollart.rewards.serve", "--port", "0", "--max-workers", "2",
                             "--functions", functions], stdout=subprocess.PIPE, text=True, env=env)
    try:
        banner = await asyncio.to_thread(proc.stdout.readline)
        assert "reward endpoint on http://127.0.0.1:" in banner, banner
        url = banner.split()[3]
        async with RewardClient(url) as client:
            for text in ["1/2", "0.5", r"\frac{1}{2}", r"\boxed{0.5}"]:
                assert await client.call("math_verify", text, r"\frac{1}{2}") == 1.0
            assert await client.call("math_verify", "no answer here", "1/2") == 0.0
            assert await client.call("numeric", text="about 3.1416", reference="3.14159", rel_tol=1e-4) == 1.0
            assert await client.call("contains_reference", "It is Paris", "paris") == 1.0
            with pytest.raises(RewardCallError) as e:
                await client.call("math_verify", r"\boxed{1}", "")
            assert e.value.status == 500 and not e.value.retryable and "no reference answer" in one_line(e)
            try:
                resolve_mode("auto")
            except SandboxUnavailable as why:  # the endpoint refuses as the sandbox does, never runs unsandboxed
                with pytest.raises(RewardCallError) as e:
                    await client.call("code_tests", "def add(a, b):\n    return a + b\n", "", **ADD)
                assert str(why) in one_line(e)
            else:
                assert await client.call("code_tests", "def add(a, b):\n    return a + b\n", "", **ADD) == 1.0
                assert await client.call("code_tests", "def add(a, b):\n    return 0\n", "", **ADD) == 0.0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
