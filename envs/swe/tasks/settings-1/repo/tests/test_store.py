from settings import Settings


def test_defaults():
    assert Settings().get("timeout") == 30


def test_override():
    s = Settings({"timeout": 5})
    assert s.get("timeout") == 5
