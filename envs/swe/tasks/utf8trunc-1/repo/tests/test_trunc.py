from utf8trunc import truncate_bytes


def test_ascii():
    assert truncate_bytes("hello", 3) == b"hel"


def test_short_text():
    assert truncate_bytes("hi", 10) == b"hi"
