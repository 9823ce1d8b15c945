"""StopStringChecker: incremental detokenization of one request's output to detect stop strings.

Decoding the whole output every token costs O(n^2); instead only the last few tokens are decoded and
the new text appended (a token that ends mid-UTF-8 character waits for the next one).
"""
from __future__ import annotations


class StopStringChecker:
    def __init__(self, tokenizer, stop: list[str]):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.max_len = max((len(s) for s in self.stop), default=0)
        self.text = ""
        self.prefix_offset = 0
        self.read_offset = 0

    def append(self, output_ids: list[int]) -> str | None:
        """Account for output_ids[-1]; returns the stop string that now appears in the text, if any."""
        prefix = self.tokenizer.decode(output_ids[self.prefix_offset:self.read_offset])
        full = self.tokenizer.decode(output_ids[self.prefix_offset:])
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return None  # incomplete character: wait for more tokens
        new = full[len(prefix):]
        self.text += new
        self.prefix_offset, self.read_offset = self.read_offset, len(output_ids)
        tail = self.text[-(len(new) + self.max_len):]
        for s in self.stop:
            if s in tail:
                return s
        return None
