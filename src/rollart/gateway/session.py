"""One trajectory as the gateway sees it: its API key, its prompts, its recorded calls, and the one entry point
every call goes through (:meth:`AgentSession.generate`), which asks the run's guard (the staleness gate) first."""
from __future__ import annotations

import asyncio
import dataclasses
import secrets
import zlib
from typing import Any, Protocol

from rollart.gateway.prompt import ChatPrompter
from rollart.gateway.record import Call, TrajectoryRecord
from rollart.gateway.tool_format import ToolSyntax
from rollart.rollout.chat import ChatFormat
from rollart.types import GenerationResult, SamplingParams


class CallRefused(Exception):
    """A call the gateway answers with an HTTP error (``status``) and one line (``message``)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class CallGuard(Protocol):
    """What a run checks around each call of a trajectory (rollart.gateway.agent_task implements it)."""

    def before_call(self, session: "AgentSession") -> None:
        """Raise CallRefused to refuse the call (e.g. the trajectory went stale)."""

    def after_call(self, session: "AgentSession", out: GenerationResult) -> None: ...


class AgentSession:
    """See module docstring. ``sampling`` set: the trajectory samples with it (the trained policy's temperature);
    a request's ``max_tokens`` may only lower its ``max_tokens``. None: the request's own sampling is used."""

    def __init__(self, trajectory_id: str, chat: ChatFormat, task: str = "default", group_id: str = "",
                 sampling: SamplingParams | None = None, seed: int | None = None,
                 guard: CallGuard | None = None, tool_syntax: ToolSyntax = ToolSyntax()) -> None:
        self.trajectory_id, self.task, self.group_id = trajectory_id, task, group_id or trajectory_id
        self.api_key = "rk-" + secrets.token_urlsafe(18)
        self.chat = chat
        self.tool_syntax = tool_syntax
        self.prompter = ChatPrompter(chat, tool_syntax)
        self.sampling, self.seed, self.guard = sampling, seed, guard
        self.record = TrajectoryRecord()
        self.lock = asyncio.Lock()
        """Calls of one trajectory are served one at a time, in arrival order, so the record is ordered."""
        self.start_version: int | None = None
        self.ended: str | None = None
        """Why the trajectory ended (calls are then refused)."""
        self.forced_calls = 0
        """Calls answered by the gateway without the model (a ``tool_choice`` that forces an argument-free tool)."""
        self.prev_text: str | None = None
        self.prev_ids: list[int] = []
        """/v1/completions: the previous prompt + completion as text and ids (a string prompt may extend them)."""

    @property
    def calls(self) -> list[Call]:
        return self.record.calls

    def params(self, request: dict[str, Any], stop_token_ids: list[int]) -> SamplingParams:
        """Sampling of one call: the session's (or the request's), the request's max_tokens and stop strings."""
        stop = request.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        asked = request.get("max_completion_tokens") or request.get("max_tokens")
        if self.sampling is not None:
            base = self.sampling
            max_tokens = min(int(asked), base.max_tokens) if asked else base.max_tokens
            params = dataclasses.replace(base, max_tokens=max_tokens, min_tokens=min(base.min_tokens, max_tokens),
                                         stop=list(base.stop) + stop, stop_token_ids=list(stop_token_ids))
        else:
            params = SamplingParams(temperature=float(request.get("temperature", 1.0)),
                                    top_p=float(request.get("top_p", 1.0)), max_tokens=int(asked or 64),
                                    stop=stop, stop_token_ids=list(stop_token_ids),
                                    seed=request.get("seed"))
        if self.seed is not None:  # per call, not per arrival order (as env trajectories do per turn)
            params = dataclasses.replace(params, seed=zlib.crc32(f"{self.seed}/{self.trajectory_id}/"
                                                                 f"{len(self.calls)}".encode()))
        return params

    async def generate(self, proxy: Any, prompt_ids: list[int], params: SamplingParams) -> tuple[Call, GenerationResult]:
        """One generation for this trajectory, recorded; refused with CallRefused when the run says so."""
        if self.ended is not None:
            raise CallRefused(409, f"trajectory {self.trajectory_id} has ended ({self.ended}); stop calling")
        if self.guard is not None:
            self.guard.before_call(self)
        out = await proxy.generate(self.trajectory_id, prompt_ids, params, self.task)
        if out.finish_reason == "abort":
            raise CallRefused(409, f"trajectory {self.trajectory_id}: generation aborted by the run "
                                   "(stale or dropped); stop calling", "aborted")
        if self.guard is not None:
            self.guard.after_call(self, out)
        return self.record.add(prompt_ids, out), out
