from humanize import format_bytes


def test_small():
    assert format_bytes(10) == "10 B"


def test_kib():
    assert format_bytes(1536) == "1.5 KiB"
