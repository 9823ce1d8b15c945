"""Cut text to a byte budget (e.g. for a database column)."""


def truncate_bytes(text, limit):
    """UTF-8 encoding of ``text``, at most ``limit`` bytes."""
    return text.encode("utf-8")[:limit]
