"""Unified diffs (as in SWE-bench ``patch`` / ``test_patch``): parse, apply strictly, turn into edits."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A diff that does not parse or does not apply to the given text."""


@dataclass
class Hunk:
    old_start: int
    new_start: int
    lines: list[str] = field(default_factory=list)  # each starts with ' ', '-' or '+'

    @property
    def old_text(self) -> str:
        return "".join(line[1:] for line in self.lines if line[0] in " -")

    @property
    def new_text(self) -> str:
        return "".join(line[1:] for line in self.lines if line[0] in " +")


@dataclass
class FilePatch:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


def _strip_prefix(name: str) -> str | None:
    name = name.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def parse_patch(text: str) -> list[FilePatch]:
    """Parse a (git-style or plain) unified diff into per-file patches."""
    files: list[FilePatch] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append(FilePatch(_strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])))
            i += 2
            continue
        m = _HUNK.match(line)
        if m:
            if not files:
                raise PatchError(f"hunk before any file header at line {i + 1}")
            old_len = int(m.group(2) or 1)
            new_len = int(m.group(4) or 1)
            hunk = Hunk(int(m.group(1)), int(m.group(3)))
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_len or seen_new < new_len):
                body = lines[i]
                if body.startswith("\\"):
                    i += 1
                    continue
                if body == "\n":
                    body = " \n"
                if body[0] not in " -+":
                    raise PatchError(f"bad hunk line {i + 1}: {body[:40]!r}")
                hunk.lines.append(body if body.endswith("\n") else body + "\n")
                seen_old += body[0] in " -"
                seen_new += body[0] in " +"
                i += 1
            while i < len(lines) and lines[i].startswith("\\"):  # "\ No newline at end of file"
                if hunk.lines:
                    hunk.lines[-1] = hunk.lines[-1].rstrip("\n")
                i += 1
            files[-1].hunks.append(hunk)
            continue
        i += 1
    if not files:
        raise PatchError("no file headers (--- / +++) found in the patch")
    return files


def apply_file_patch(old: str | None, fp: FilePatch) -> str | None:
    """Apply one file's hunks to its old text (None = file absent). Returns the new text (None = deleted)."""
    if fp.new_path is None:
        return None
    text = old or ""
    out: list[str] = []
    src = text.splitlines(keepends=True)
    pos = 0
    for h in fp.hunks:
        want = [line[1:] for line in h.lines if line[0] in " -"]
        start = max(h.old_start - 1, 0) if want else max(h.old_start, 0)
        found = None
        for delta in range(0, len(src) + 1):  # exact position first, then nearby
            for cand in (start + delta, start - delta):
                if pos <= cand <= len(src) - len(want) and src[cand:cand + len(want)] == want:
                    found = cand
                    break
            if found is not None:
                break
        if found is None:
            raise PatchError(f"{fp.path}: hunk at line {h.old_start} does not apply")
        out.extend(src[pos:found])
        out.extend(line[1:] for line in h.lines if line[0] in " +")
        pos = found + len(want)
    out.extend(src[pos:])
    return "".join(out)


def patched_files(patch_text: str, read_old) -> dict[str, str | None]:
    """Apply a whole diff: ``read_old(path) -> str | None`` gives the base text; returns new texts."""
    return {fp.path: apply_file_patch(read_old(fp.old_path) if fp.old_path else None, fp)
            for fp in parse_patch(patch_text)}
