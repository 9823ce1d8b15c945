from textwrap2 import wrap


def test_basic():
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]


def test_empty():
    assert wrap("", 5) == []
