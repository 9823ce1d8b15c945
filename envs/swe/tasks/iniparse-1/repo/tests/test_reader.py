import pytest
from iniparse import parse


def test_sections():
    assert parse("[a]\nx = 1\n[b]\ny=2") == {"a": {"x": "1"}, "b": {"y": "2"}}


def test_key_outside_section():
    with pytest.raises(ValueError):
        parse("x = 1")
