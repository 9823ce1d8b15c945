"""Sampling parameters for one generation request (shared by every engine backend)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


class InvalidRequestError(ValueError):
    """A single request was bad (empty prompt, too long, invalid sampling). Recoverable per request."""


@dataclass
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest token set whose probability reaches top_p (0 < top_p <= 1)."""
    top_k: int = -1
    """Keep only the k most likely tokens; -1 disables."""
    max_tokens: int = 64
    """Maximum number of new tokens to generate."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Generation stops after any of these tokens (the token is kept in the output)."""
    stop: list[str] = field(default_factory=list)
    """Generation stops once the decoded output contains any of these strings."""
    seed: int | None = None
    """Per-request seed: the same seed, prompt and weights give the same tokens."""
    ignore_eos: bool = False
    """Keep generating past the tokenizer's end-of-sequence token."""
    min_tokens: int = 0
    """Generate at least this many tokens: stop tokens, EOS and stop strings end generation only after
    it (they are sampled as usual, not masked, so logprobs stay those of the policy; vLLM masks them)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if not (self.temperature >= 0):
            raise InvalidRequestError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (self.top_k == -1 or self.top_k >= 1):
            raise InvalidRequestError(f"top_k must be -1 (disabled) or >= 1, got {self.top_k}")
        if not (isinstance(self.max_tokens, int) and self.max_tokens >= 1):
            raise InvalidRequestError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not (isinstance(self.min_tokens, int) and 0 <= self.min_tokens <= self.max_tokens):
            raise InvalidRequestError(f"min_tokens must be an int in [0, max_tokens={self.max_tokens}], "
                                      f"got {self.min_tokens!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SamplingParams":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise InvalidRequestError(f"unknown sampling parameters {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)
