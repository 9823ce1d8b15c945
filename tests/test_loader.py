"""rollart.loader: "package.module:name" strings resolved in one place, with one-line errors saying what to fix."""
import sys

import pytest

from rollart.actors.dispatch import import_class
from rollart.config import ConfigError
from rollart.engine.registry import register_engine
from rollart.loader import LoadError, load, split
from rollart.rewards.registry import FunctionRegistry
from rollart.rollout.env_manager import TaskSpec, _step_action


def test_loads_module_attributes_and_dotted_names():
    from rollart.rewards.rules import math_reward
    assert load("rollart.rewards.rules:math_reward") is math_reward
    assert load(" rollart.loader : LoadError.__name__ ") == "LoadError"  # spaces around the parts are dropped
    assert split("a.b:C.d") == ("a.b", "C.d")


@pytest.mark.parametrize("spec", ["rollart.loader", ":load", "rollart.loader:", "", None])
def test_a_string_that_is_not_module_colon_name_says_how_to_write_one(spec):
    with pytest.raises(LoadError) as e:
        load(spec, "reward function")
    assert str(e.value) == f"reward function {spec!r} is not a 'package.module:name' string"


def test_missing_module_and_missing_name_name_the_part_to_fix():
    with pytest.raises(LoadError, match=r"actor class 'nosuchpkg\.mod:X': cannot import module 'nosuchpkg\.mod' "
                                        r"\(No module named 'nosuchpkg'\); check the part before the ':'"):
        load("nosuchpkg.mod:X", "actor class")
    with pytest.raises(LoadError, match=r"module 'rollart\.loader' has no 'Nope\.x'; check the part after the ':'"):
        load("rollart.loader:Nope.x")
    err = LoadError("x")
    assert isinstance(err, ImportError) and isinstance(err, ValueError)  # callers catching either keep working


def test_an_error_inside_the_module_itself_keeps_its_traceback(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('a bug in the plug-in')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="a bug in the plug-in"):
        load("broken_plugin:Thing")
    sys.modules.pop("broken_plugin", None)


def test_every_caller_speaks_the_loaders_errors():
    with pytest.raises(LoadError, match="actor class 'rollart.loader:nope': module 'rollart.loader' has no 'nope'"):
        import_class("rollart.loader:nope")
    with pytest.raises(TypeError, match="actor class 'rollart.loader:load' is not a class"):
        import_class("rollart.loader:load")
    with pytest.raises(ValueError, match="engine entry point 'no_colon' is not a 'package.module:name' string"):
        register_engine("mine", "no_colon")
    with pytest.raises(ValueError, match="reward function 'nosuchmod:f': cannot import module 'nosuchmod'"):
        FunctionRegistry(["nosuchmod:f"])
    task = TaskSpec(name="Lake", env_id="rollart/FrozenLake-v0", step_action="rollart.loader:no_such_fn")
    with pytest.raises(ConfigError, match="task Lake: step_action 'rollart.loader:no_such_fn': module 'rollart.loader' "
                                          "has no 'no_such_fn'"):
        _step_action(task, "text", 0, {})
