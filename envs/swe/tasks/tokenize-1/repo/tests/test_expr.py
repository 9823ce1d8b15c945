from calc import evaluate


def test_precedence():
    assert evaluate("2 + 3 * 4") == 14


def test_parens():
    assert evaluate("(2 + 3) * 4") == 20
