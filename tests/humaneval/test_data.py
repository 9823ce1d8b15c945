"""HumanEval data loading: the wheel's 164 problems offline, explicit files, clear errors."""
import gzip
import json

import pytest

from envs.humaneval.data import load_problems


def test_wheel_data_has_164_problems_with_tests():
    problems = load_problems()
    assert len(problems) == 164
    assert problems[0].task_id == "HumanEval/0" and problems[-1].task_id == "HumanEval/163"
    assert all("def check(candidate)" in p.test and p.entry_point in p.prompt for p in problems)


def test_explicit_path_gz_and_plain(tmp_path):
    row = {"task_id": "T/0", "prompt": "def f():\n", "entry_point": "f", "canonical_solution": "    return 1\n",
           "test": "def check(c):\n    assert c() == 1\n"}
    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps(row) + "\n")
    gz = tmp_path / "p.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert load_problems(plain)[0].task_id == load_problems(gz)[0].task_id == "T/0"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_problems(bad)
