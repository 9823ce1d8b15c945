import pytest
from durations import parse_duration


def test_hours():
    assert parse_duration("2h") == 7200


def test_garbage():
    with pytest.raises(ValueError):
        parse_duration("soon")
