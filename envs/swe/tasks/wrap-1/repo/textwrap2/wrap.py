"""Greedy word wrapping."""


def wrap(text, width):
    lines, current = [], ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
