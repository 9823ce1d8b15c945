"""A tiny CSV row splitter."""


def split_row(line, delimiter=","):
    """Split one CSV line into fields."""
    return [field.strip() for field in line.rstrip("\n").split(delimiter)]
