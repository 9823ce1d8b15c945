"""A user's file read into rows: the common layouts without a mapping, a mapping for other columns, and one-line
errors naming the file and the column for everything wrong."""
import json

import pytest

pytest.importorskip("datasets")

from rollart.config import ConfigError
from rollart.data.rows import Columns, read_rows


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_prompt_answer_layout(tmp_path):
    rows = read_rows(_jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1?", "answer": "2"},
                                                  {"prompt": "2+2?", "answer": 4}]))
    assert [(r.prompt, r.answer, r.source) for r in rows] == [("1+1?", "2", "data"), ("2+2?", "4", "data")]


def test_gsm8k_layout_takes_the_part_after_the_marks(tmp_path):
    rows = read_rows(_jsonl(tmp_path / "g.jsonl", [{"question": "Q", "answer": "3 * 4 = 12\n#### 1,200"}]))
    assert rows[0].prompt == "Q" and rows[0].answer == "1200"


def test_verl_parquet_layout(tmp_path):
    datasets = pytest.importorskip("datasets")
    records = [{"data_source": "gsm8k", "prompt": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "What is 6*7?"}],
                "reward_model": {"style": "rule", "ground_truth": "42"}, "extra_info": {"index": 0}},
               {"data_source": "math", "prompt": [{"role": "user", "content": "1+2?"}],
                "reward_model": {"style": "rule", "ground_truth": "3"}, "extra_info": {"index": 1}}]
    path = tmp_path / "train.parquet"
    datasets.Dataset.from_list(records).to_parquet(str(path))
    rows = read_rows(str(path))
    assert [(r.prompt, r.answer, r.source, r.system) for r in rows] == [
        ("What is 6*7?", "42", "gsm8k", "Be brief."), ("1+2?", "3", "math", "")]
    assert rows[0].extra["extra_info"] == {"index": 0}


def test_save_to_disk_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list([{"problem": "P", "solution": "S"}])}).save_to_disk(
        str(tmp_path / "ds"))
    rows = read_rows(str(tmp_path / "ds"))
    assert (rows[0].prompt, rows[0].answer) == ("P", "S")


def test_mapping_names_other_columns(tmp_path):
    path = _jsonl(tmp_path / "m.jsonl", [{"q": "x?", "meta": {"gold": "7"}, "kind": "algebra"}])
    rows = read_rows(path, Columns(prompt="q", answer="meta.gold", source="kind"))
    assert (rows[0].prompt, rows[0].answer, rows[0].source) == ("x?", "7", "algebra")


def test_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "d.jsonl"
    _jsonl(path, [{"prompt": "a", "answer": "1"}])
    assert len(read_rows(str(path))) == 1
    import os
    _jsonl(path, [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert len(read_rows(str(path))) == 2


@pytest.mark.parametrize("records,columns,words", [
    ([{"text": "x", "answer": "1"}], Columns(), ["no prompt column", "columns.prompt=NAME", "'text'"]),
    ([{"prompt": "x", "label": "1"}], Columns(), ["no answer column", "columns.answer=NAME"]),
    ([{"prompt": "x", "answer": "1"}], Columns(prompt="query"), ["no column 'query'", "columns.prompt=NAME"]),
    ([{"prompt": "x", "answer": "1"}], Columns(source="task"), ["no column 'task'", "columns.source=NAME"]),
    ([{"prompt": "", "answer": "1"}], Columns(), ["row 0", "non-empty string"]),
])
def test_bad_mapping_is_one_line_naming_file_and_column(tmp_path, records, columns, words):
    path = _jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(ConfigError) as e:
        read_rows(path, columns)
    message = str(e.value)
    assert "\n" not in message and path in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("name,content,words", [
    ("missing.jsonl", None, ["does not exist"]),
    ("data.csv", "a,b\n", ["unknown file type '.csv'"]),
    ("broken.jsonl", "{not json\n", ["cannot be read"]),
    ("empty.jsonl", "", ["cannot be read"]),
])
def test_bad_file_is_one_line(tmp_path, name, content, words):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as e:
        read_rows(str(path))
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    for word in words:
        assert word in str(e.value)
