"""Covers rollart.config: command-line overrides of dataclass configs and their error messages."""
from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from rollart.config import ConfigError, apply_overrides, field_docs, given_keys, parse_overrides


@dataclass
class Inner:
    lr: float = 1e-3
    """Learning rate."""
    betas: tuple = (0.9, 0.99)


@dataclass
class Outer:
    mode: Literal["async", "sync"] = "async"
    """Training mode."""
    steps: int = 10
    resume: bool = False
    ckpt: Optional[str] = None
    tags: dict = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


def test_overrides_parse_types_and_nesting():
    cfg = apply_overrides(Outer(), ["mode=sync", "steps=3", "inner.lr=0.5", "ckpt=/tmp/x",
                                    'tags={"FrozenLake": "H800"}', "resume=true"])
    assert (cfg.mode, cfg.steps, cfg.inner.lr, cfg.ckpt, cfg.resume) == ("sync", 3, 0.5, "/tmp/x", True)
    assert cfg.tags == {"FrozenLake": "H800"}
    assert Outer().inner.lr == 1e-3  # the default is untouched


def test_given_keys_read_the_command_line_as_parse_overrides_does():
    assert given_keys(["--warmup-steps", "30", "model=/m", "--resume", "--inner.lr=0.5"]) == \
        {"warmup_steps", "model", "resume", "inner.lr"}


def test_bare_flag_and_none():
    cfg = parse_overrides(Outer(ckpt="a"), ["--resume", "ckpt=none"])
    assert cfg.resume is True and cfg.ckpt is None


@pytest.mark.parametrize("bad,needle", [
    (["stepz=3"], "did you mean"),
    (["steps=three"], "expected int"),
    (["mode=fast"], "expected one of"),
    (["steps"], "key=value"),
    (["steps.x=1"], "not a nested config"),
])
def test_bad_overrides_name_the_problem(bad, needle):
    with pytest.raises(ConfigError, match=needle):
        apply_overrides(Outer(), bad)


def test_field_docs_read_docstrings():
    assert field_docs(Outer)["mode"] == "Training mode."
    assert field_docs(Inner)["lr"] == "Learning rate."
