"""Bounded command output: keep the head and the tail, drop the middle behind a visible marker."""
from __future__ import annotations


def truncation_marker(dropped: int) -> str:
    return f"\n[... output truncated: {dropped} bytes not shown ...]\n"


class BoundedOutput:
    """Collects a stream of bytes keeping at most ``limit`` of them (half head, half tail)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            keep = self.limit - self.limit // 2
            if len(self.tail) > keep:
                del self.tail[: len(self.tail) - keep]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.truncated:
            return head + truncation_marker(self.total - len(self.head) - len(self.tail)) + tail
        return head + tail


def truncate_text(text: str, limit: int) -> str:
    """Cut a string to about ``limit`` characters the same way (head + marker + tail)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + truncation_marker(len(text) - 2 * half).replace("bytes", "characters") + text[-half:]
