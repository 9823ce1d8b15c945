from datetime import date
from bizdays import add_business_days


def test_midweek():
    assert add_business_days(date(2024, 3, 5), 1) == date(2024, 3, 6)
