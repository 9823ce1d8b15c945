"""Calendar-month arithmetic."""
from datetime import date


def add_months(d, months):
    total = d.year * 12 + (d.month - 1) + months
    year, month = divmod(total, 12)
    return date(year, month + 1, d.day)
