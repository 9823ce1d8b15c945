"""Which rows of a file train and which are held out: ``split_rows`` puts every row in one split (by rows,
disjoint, the same in every process: a function of the file's row count, the held-out size and a seed)."""
from __future__ import annotations

import random

from rollart.config import ConfigError


def split_rows(n: int, heldout: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """(training row indices, held-out row indices) of ``n`` rows: ``heldout`` rows if >= 1 (a count), else
    that fraction of them (rounded, at least one when the fraction is > 0); both sorted, disjoint."""
    if heldout < 0 or (heldout >= 1 and heldout != int(heldout)):
        raise ConfigError(f"heldout={heldout}: a fraction in [0, 1) or a whole number of rows")
    k = int(heldout) if heldout >= 1 else (max(1, round(n * heldout)) if heldout > 0 else 0)
    if k >= n:
        raise ConfigError(f"heldout={heldout} takes {k} of the file's {n} rows: none left to train on")
    order = list(range(n))
    random.Random(f"split/{seed}").shuffle(order)
    held = sorted(order[:k])
    train = sorted(order[k:])
    assert not set(train) & set(held)
    return train, held
