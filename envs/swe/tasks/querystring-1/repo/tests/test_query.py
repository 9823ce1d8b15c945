from qs import parse_query


def test_plain():
    assert parse_query("?a=1&b=2") == {"a": "1", "b": "2"}


def test_empty_pairs():
    assert parse_query("a=1&&b=") == {"a": "1", "b": ""}
