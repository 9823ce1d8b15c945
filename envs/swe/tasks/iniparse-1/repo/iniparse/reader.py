"""A small INI reader: sections of key = value lines."""


def parse(text):
    data, section = {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(";"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = data.setdefault(line[1:-1].strip(), {})
            continue
        if section is None:
            raise ValueError(f"key outside a section: {line!r}")
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"expected key = value: {line!r}")
        section[key.strip()] = value.strip()
    return data
