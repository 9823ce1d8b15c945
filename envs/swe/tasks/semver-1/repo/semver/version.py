"""Compare MAJOR.MINOR.PATCH version strings."""


def _key(version):
    return version.strip().split(".")


def compare(a, b):
    """-1, 0 or 1 as a <, ==, > b."""
    ka, kb = _key(a), _key(b)
    return (ka > kb) - (ka < kb)


def latest(versions):
    return max(versions, key=_key)
