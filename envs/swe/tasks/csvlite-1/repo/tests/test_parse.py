from csvlite import split_row


def test_plain():
    assert split_row("a,b,c") == ["a", "b", "c"]


def test_semicolon():
    assert split_row("a;b", delimiter=";") == ["a", "b"]
