"""Covers rollart.config on the mistakes users make on the command line: typos, wrong types, bad values."""
from dataclasses import dataclass, field

import pytest

from rollart.config import (ConfigError, apply_overrides, describe, exit_on_config_error, exit_with_error, field_docs,
                            parse_overrides)


@dataclass
class Optim:
    lr: float = 1e-3
    """Learning rate."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    widths: tuple[int, ...] = (1, 2)

    def __post_init__(self):
        if self.lr <= 0:
            raise ValueError(f"lr={self.lr} must be positive")


@dataclass
class Base:
    total_steps: int = 10
    """Steps to run."""
    policy: str = "hrrs"
    trainer: Optim = field(default_factory=Optim)

    def __post_init__(self):
        if self.policy not in ("hrrs", "fcfs"):
            raise ValueError(f"policy={self.policy!r}: use 'hrrs' or 'fcfs'")


@dataclass
class Recipe(Base):
    max_turns: int = 4
    """Turns per episode."""


def test_typo_suggests_only_the_close_setting():
    with pytest.raises(ConfigError) as e:
        apply_overrides(Recipe(), ["trainer.lrr=1"])
    assert "did you mean trainer.lr?" in str(e.value)
    assert "betas" not in str(e.value)  # not a dump of every field
    with pytest.raises(ConfigError, match="did you mean total_steps"):
        apply_overrides(Recipe(), ["totl_steps=2"])


def test_unrelated_key_points_to_help():
    with pytest.raises(ConfigError, match="unknown setting 'zzz'.*--help lists every setting"):
        apply_overrides(Recipe(), ["zzz=1"])


def test_fixed_length_tuple_is_parsed_per_position_and_length_checked():
    cfg = apply_overrides(Recipe(), ["trainer.betas=0.8,0.95", "trainer.widths=3,4,5"])
    assert cfg.trainer.betas == (0.8, 0.95) and cfg.trainer.widths == (3, 4, 5)
    with pytest.raises(ConfigError, match=r"trainer.betas='0.9': expected 2 comma-separated values"):
        apply_overrides(Recipe(), ["trainer.betas=0.9"])
    with pytest.raises(ConfigError, match="trainer.betas"):
        apply_overrides(Recipe(), ["trainer.betas=[0.9,"])


def test_plain_value_errors_from_post_init_become_config_errors_with_the_field_path():
    with pytest.raises(ConfigError, match="policy='lifo': use 'hrrs' or 'fcfs'"):
        apply_overrides(Recipe(), ["policy=lifo"])
    with pytest.raises(ConfigError, match=r"^trainer\.lr=-1.0 must be positive"):
        apply_overrides(Recipe(), ["trainer.lr=-1"])


def test_parse_overrides_exits_with_one_line_message(capsys):
    with pytest.raises(SystemExit) as e:
        parse_overrides(Recipe(), ["policy=lifo"])
    assert str(e.value).startswith("error: policy='lifo'")
    with pytest.raises(SystemExit) as e:
        parse_overrides(Recipe(), ["max_turns=abc"])
    assert str(e.value) == "error: max_turns='abc': expected int"


def test_exit_on_config_error_only_catches_config_errors():
    with pytest.raises(SystemExit, match="error: bad tag"):
        with exit_on_config_error():
            raise ConfigError("bad tag")
    with pytest.raises(KeyError):
        with exit_on_config_error():
            raise KeyError("a bug stays a traceback")


def test_exit_on_config_error_as_decorator_with_more_error_types(monkeypatch):
    monkeypatch.delenv("ROLLART_TRACEBACK", raising=False)

    @exit_on_config_error(LookupError)
    def main(error):
        raise error

    for error in (ConfigError("bad tag"), LookupError("no such plan")):
        with pytest.raises(SystemExit) as e:
            main(error)
        assert e.value.code == f"error: {error}"  # one line on stderr, exit status 1
    with pytest.raises(TypeError):
        main(TypeError("a bug stays a traceback"))


def test_rollart_traceback_lets_the_error_through(monkeypatch):
    monkeypatch.setenv("ROLLART_TRACEBACK", "1")
    with pytest.raises(ConfigError, match="bad tag"):
        with exit_on_config_error():
            raise ConfigError("bad tag")
    with pytest.raises(KeyError):
        try:
            raise KeyError("lost")
        except KeyError:
            exit_with_error("rollout stopped: lost")
    with pytest.raises(SystemExit, match="error: no exception here"):
        exit_with_error("no exception here")  # nothing to show a traceback of: the one line


def test_help_of_a_subclassed_config_shows_inherited_docs():
    docs = field_docs(Recipe)
    assert docs["total_steps"] == "Steps to run." and docs["max_turns"] == "Turns per episode."
    text = describe(Recipe())
    assert "total_steps = 10    # Steps to run." in text and "trainer.lr = 0.001    # Learning rate." in text


def test_argparse_habits_are_understood():
    cfg = parse_overrides(Recipe(), ["--total_steps", "5", "--policy", "fcfs", "--max-turns=2"])
    assert (cfg.total_steps, cfg.policy, cfg.max_turns) == (5, "fcfs", 2)


def test_bare_flag_before_an_override_is_a_boolean():
    @dataclass
    class Run:
        resume: bool = False
        steps: int = 1

    assert parse_overrides(Run(), ["--resume", "steps=3"]) == Run(resume=True, steps=3)
    assert parse_overrides(Run(), ["steps=3", "--resume"]) == Run(resume=True, steps=3)
    with pytest.raises(SystemExit, match="bad override '4'"):
        parse_overrides(Run(), ["steps=3", "4"])


@dataclass
class Routing:
    hw_classes: tuple[str, ...] = ("H800", "H20")
    hw_affinity: dict = field(default_factory=lambda: {"FrozenLake": "H800"})


def test_values_as_help_prints_them_are_accepted():
    shown = describe(Routing())
    assert "hw_classes = ('H800', 'H20')" in shown and "hw_affinity = {'FrozenLake': 'H800'}" in shown
    cfg = apply_overrides(Routing(), ["hw_classes=('H20', 'H800')", "hw_affinity={'Lake': 'H20'}"])
    assert cfg.hw_classes == ("H20", "H800") and cfg.hw_affinity == {"Lake": "H20"}
    cfg = apply_overrides(Routing(), ["hw_classes=H20, H800", 'hw_affinity={"Lake": "H20"}'])
    assert cfg.hw_classes == ("H20", "H800") and cfg.hw_affinity == {"Lake": "H20"}


def test_unquoted_json_object_gets_a_quoting_hint():
    with pytest.raises(ConfigError, match=r"hw_affinity: expected a JSON object, got '\{FrozenLake:H800\}'; "
                                          "write it in single quotes"):
        apply_overrides(Routing(), ["hw_affinity={FrozenLake:H800}"])  # what the shell leaves of {"FrozenLake":"H800"}


def test_help_prints_the_doc_first(capsys):
    with pytest.raises(SystemExit) as e:
        parse_overrides(Recipe(), ["--help"], doc="\nTrains a thing.\n\n    python -m recipes.thing\n")
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert out.startswith("Trains a thing.\n\n    python -m recipes.thing\n\nSettings (key=value):\n  total_steps = 10")
