"""Business-day arithmetic (Monday-Friday)."""
from datetime import timedelta


def add_business_days(start, days):
    """The date ``days`` business days after ``start``."""
    current = start
    for _ in range(days):
        current += timedelta(days=1)
    return current
