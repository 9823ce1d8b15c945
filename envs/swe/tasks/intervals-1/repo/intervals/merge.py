"""Merge closed integer intervals."""


def merge(intervals):
    out = []
    for start, end in intervals:
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
