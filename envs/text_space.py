"""The gymnasium spaces used for free-form text observations and actions."""
from __future__ import annotations

import string

from gymnasium import spaces

PRINTABLE = frozenset(string.printable)


def text_space(max_length: int) -> spaces.Text:
    """Any printable string up to ``max_length`` characters (newlines included)."""
    return spaces.Text(max_length=max_length, min_length=0, charset=PRINTABLE)


class AnyText(spaces.Text):
    """Any Python string of ``min_length``..``max_length`` characters: issues and code hold non-ASCII text,
    which a charset (``text_space``) would refuse."""

    def __init__(self, max_length: int, min_length: int = 0):
        super().__init__(max_length=max_length, min_length=min_length)

    def contains(self, x) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length
