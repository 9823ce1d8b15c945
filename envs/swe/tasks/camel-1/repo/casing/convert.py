"""Identifier case conversion."""
import re


def camel_to_snake(name):
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
