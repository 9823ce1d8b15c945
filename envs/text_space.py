"""The gymnasium space used for free-form text observations and actions."""
from __future__ import annotations

import string

from gymnasium import spaces

PRINTABLE = frozenset(string.printable)


def text_space(max_length: int) -> spaces.Text:
    """Any printable string up to ``max_length`` characters (newlines included)."""
    return spaces.Text(max_length=max_length, min_length=0, charset=PRINTABLE)
