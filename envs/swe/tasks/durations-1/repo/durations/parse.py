"""Parse durations like "1h30m15s" into seconds."""
import re

UNITS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text):
    match = re.match(r"(\d+)([a-z])", text.strip())
    if not match:
        raise ValueError(f"bad duration: {text!r}")
    number, unit = match.groups()
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}")
    if unit == "m":
        return 0
    return int(number) * UNITS[unit]
