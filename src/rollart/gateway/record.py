"""What the gateway records of one trajectory: every call's exact token ids, and the segments it trains on.

A trajectory's calls normally extend each other: call k+1's prompt starts with call k's prompt + completion,
token for token, so the whole conversation is one sequence in which the completions are the model's tokens
(loss mask 1, their logprobs and policy versions) and everything else (prompts, tool results) has mask 0.
When an agent's next prompt does not extend the previous prompt + completion (it summarised or dropped
history, or edited a message), the trajectory *forks*: a new segment starts with that prompt. Each segment
is trained as its own row, so no row holds tokens the model never saw in that order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rollart.types import GenerationResult, Trajectory


@dataclass
class Call:
    """One generation the agent asked for."""
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    finish_reason: str
    segment: int
    """Index of the segment the call extended (or started)."""


@dataclass
class Segment:
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    def extend(self, ids: list[int], logprobs: list[float] | None = None, versions: list[int] | None = None) -> None:
        model = logprobs is not None
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if model else 0] * len(ids))
        self.logprobs.extend(logprobs if model else [0.0] * len(ids))
        self.versions.extend(versions if versions is not None else [-1] * len(ids))

    def as_dict(self) -> dict:
        return dict(token_ids=self.token_ids, loss_mask=self.loss_mask, logprobs=self.logprobs,
                    versions=self.versions)


class TrajectoryRecord:
    """The calls and segments of one trajectory (see module docstring)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.segments: list[Segment] = []

    @property
    def forks(self) -> int:
        """How many times the trajectory forked (segments after the first)."""
        return max(0, len(self.segments) - 1)

    def extends(self, prompt_ids: list[int]) -> bool:
        """Whether ``prompt_ids`` continues the current segment (previous prompt + completion) token for token."""
        if not self.segments:
            return False
        seg = self.segments[-1].token_ids
        return len(prompt_ids) >= len(seg) and prompt_ids[:len(seg)] == seg

    def add(self, prompt_ids: list[int], out: GenerationResult) -> Call:
        """Record one finished generation; forks when the prompt does not extend the current segment."""
        if self.extends(prompt_ids):
            seg = self.segments[-1]
            seg.extend(prompt_ids[len(seg.token_ids):])
        else:
            seg = Segment()
            self.segments.append(seg)
            seg.extend(prompt_ids)
        seg.extend(list(out.token_ids), list(out.logprobs), list(out.versions))
        call = Call(list(prompt_ids), list(out.token_ids), list(out.logprobs), list(out.versions),
                    out.finish_reason, len(self.segments) - 1)
        self.calls.append(call)
        return call

    def fill(self, traj: Trajectory) -> None:
        """Put the segments into ``traj``: the last one as its token sequence, earlier ones in
        ``traj.info["segments"]`` (each trained as its own row with the trajectory's advantage)."""
        if not self.segments:
            return
        last = self.segments[-1]
        traj.token_ids, traj.loss_mask = list(last.token_ids), list(last.loss_mask)
        traj.logprobs, traj.versions = list(last.logprobs), list(last.versions)
        traj.num_turns = len(self.calls)
        if len(self.segments) > 1:
            traj.info["segments"] = [s.as_dict() for s in self.segments[:-1]]
        traj.info["forks"] = self.forks
