"""Measures of central tendency."""


def mean(values):
    values = list(values)
    if not values:
        raise ValueError("mean of empty data")
    return sum(values) / len(values)


def median(values):
    values = list(values)
    if not values:
        raise ValueError("median of empty data")
    return values[len(values) // 2]
