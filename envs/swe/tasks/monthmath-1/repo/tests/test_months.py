from datetime import date
from monthmath import add_months


def test_mid_month():
    assert add_months(date(2023, 1, 15), 1) == date(2023, 2, 15)


def test_year_wrap():
    assert add_months(date(2023, 11, 5), 3) == date(2024, 2, 5)
