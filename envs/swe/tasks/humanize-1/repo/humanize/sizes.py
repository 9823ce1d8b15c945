"""Human-readable byte counts (binary units)."""

UNITS = ["B", "KiB", "MiB", "GiB", "TiB"]


def format_bytes(n):
    if n < 0:
        raise ValueError("negative size")
    value = float(n)
    for unit in UNITS:
        if value <= 1024 or unit == UNITS[-1]:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
