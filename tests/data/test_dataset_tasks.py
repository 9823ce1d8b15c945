"""A file becomes tasks (one per data_source) played by rollart/Dataset-v0: the row a reset seed names, scored by
the verifier, held-out rows disjoint from training (checked), and every mistake one line before anything starts."""
import json

import gymnasium as gym
import pytest

pytest.importorskip("datasets")
pytest.importorskip("math_verify")

import envs  # noqa: F401  (registers rollart/Dataset-v0)
from rollart.config import ConfigError, apply_overrides
from rollart.data.tasks import DatasetConfig, dataset_tasks, split_of
from rollart.data.rows import Columns
from rollart.pipeline.heldout import check_disjoint


def _file(tmp_path, records, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _math_rows(n=30):
    return [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i), "data_source": ("add", "double")[i % 2]}
            for i in range(n)]


def test_one_task_per_source_with_disjoint_heldout_rows(tmp_path):
    path = _file(tmp_path, _math_rows())
    tasks = dataset_tasks(DatasetConfig(path=path, heldout=6))
    assert [t.name for t in tasks.train] == ["add", "double"] == [t.name for t in tasks.heldout]
    assert sum(t.rows for t in tasks.train) == 24 and sum(t.rows for t in tasks.heldout) == 6
    assert all(t.env_id == "rollart/Dataset-v0" and t.max_turns == 1 for t in tasks.train)
    check_disjoint(tasks.train, tasks.heldout)  # the env declares its prompts: none shared
    for source in ("add", "double"):
        train = {r.prompt for r in split_of(path, Columns(), source, "train", 6, 0)}
        held = {r.prompt for r in split_of(path, Columns(), source, "heldout", 6, 0)}
        assert train and held and not train & held


def test_a_prompt_in_both_splits_is_caught_before_the_run(tmp_path):
    rows = _math_rows(10) + _math_rows(10)  # every prompt twice: some copy lands in each split
    tasks = dataset_tasks(DatasetConfig(path=_file(tmp_path, rows), heldout=0.3))
    with pytest.raises(ConfigError, match="shares .* instances with training task"):
        check_disjoint(tasks.train, tasks.heldout)


def test_env_plays_the_row_its_seed_names_and_scores_with_the_verifier(tmp_path):
    path = _file(tmp_path, [{"prompt": f"half of {i}?", "answer": f"\\frac{{{i}}}{{2}}"} for i in range(1, 6)])
    env = gym.make("rollart/Dataset-v0", path=path, source="data", heldout=0)
    obs, info = env.reset(seed=7)  # row 7 % 5 = 2
    assert obs == "half of 3?" and info["row"] == 2
    _, reward, done, _, info = env.step("So the answer is \\boxed{1.5}.")
    assert (reward, done, info["success"]) == (1.0, True, True)
    env.reset(seed=2)
    _, reward, done, _, info = env.step("I think it is 2")
    assert (reward, done, info["success"]) == (0.0, True, False)


def test_format_bonus_and_tool_turns(tmp_path):
    path = _file(tmp_path, [{"prompt": "12 * 13?", "answer": "156"}])
    env = gym.make("rollart/Dataset-v0", path=path, source="data", heldout=0, tools=True, format_weight=0.2)
    obs, _ = env.reset(seed=0)
    assert "<calc>" in obs
    obs, reward, done, _, _ = env.step("<calc>12*13</calc>")
    assert (obs, reward, done) == ("Result: 156", 0.0, False)
    _, reward, done, _, info = env.step("\\boxed{156}")
    assert done and info["success"] and reward == pytest.approx(1.2)
    env.reset(seed=0)
    assert env.step("156")[1] == pytest.approx(1.0)  # right, not boxed: no bonus


def test_extra_columns_reach_the_verifier(tmp_path):
    path = _file(tmp_path, [{"prompt": "pi?", "answer": "3.14159", "rel_tol": 0.01}])
    env = gym.make("rollart/Dataset-v0", path=path, source="data", heldout=0, verifier="numeric")
    env.reset(seed=0)
    assert env.step("about 3.14")[1] == 1.0
    env.reset(seed=0)
    assert env.step("about 3.0")[1] == 0.0


@pytest.mark.parametrize("settings,words", [
    (dict(path=""), ["data.path is empty"]),
    (dict(verifier="math_verifyy"), ["math_verifyy"]),
    (dict(verifier="no_such_module:fn"), ["no_such_module"]),
    (dict(heldout=30), ["none left to train on"]),
    (dict(columns=Columns(answer="gold")), ["no column 'gold'", "columns.answer=NAME"]),
])
def test_mistakes_stop_before_anything_starts_in_one_line(tmp_path, settings, words):
    path = _file(tmp_path, _math_rows())
    with pytest.raises(ConfigError) as e:
        dataset_tasks(DatasetConfig(**{"path": path, **settings}))
    assert "\n" not in str(e.value)
    for word in words:
        assert word in str(e.value)


def test_data_equals_path_is_the_shorthand_of_data_path(tmp_path):
    from dataclasses import dataclass, field

    @dataclass
    class Cfg:
        data: DatasetConfig = field(default_factory=DatasetConfig)

    cfg = apply_overrides(Cfg(), ["data=/x/y.jsonl", "data.columns.prompt=q", "data.heldout=5"])
    assert (cfg.data.path, cfg.data.columns.prompt, cfg.data.heldout) == ("/x/y.jsonl", "q", 5)
