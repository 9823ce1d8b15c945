"""Format warm-up transcripts of agent tasks: the user's agent run through the real gateway against a stand-in
model that writes random valid replies.

An env task says what a valid answer is with ``sample_action(rng)``; an agent task says it with
``AgentTask.sample_reply(rng, call)``: the text a model that knows the agent's protocol, and nothing of the task,
would write at the agent's ``call``-th call (e.g. "call the tool" or "answer any digit"). Each transcript is one
run of the agent itself, with its own prompts, tools and tool results, through :class:`Gateway` and
:class:`AgentRunner` as in training, so the warm-up trains on exactly the token sequences (and the loss mask:
the replies only) that a rollout of the same agent records. The replies are drawn independently of the task
instance, so the warmed model learns the format and no policy.
"""
from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import numpy as np

from rollart.gateway.agent_task import AgentRunner, AgentTask
from rollart.gateway.server import Gateway
from rollart.rollout.chat import ChatFormat
from rollart.types import GenerationResult, SamplingParams


class ReplySampler:
    """Stands in for the LLMProxy: each call's reply is ``task.sample_reply(rng, call)``, cut to the call's
    ``max_tokens`` and closed with the stop token when there is room, as the engine would end it."""

    def __init__(self, task: AgentTask, tokenizer: Any, rng: np.random.Generator) -> None:
        self.task, self.rng = task, rng
        self.chat = ChatFormat(tokenizer, "")
        self.calls: dict[str, int] = {}

    async def generate(self, trajectory_id: str, prompt_ids: list[int], params: SamplingParams,
                       task: str = "") -> GenerationResult:
        call = self.calls.get(trajectory_id, 0)
        self.calls[trajectory_id] = call + 1
        text = self.task.sample_reply(self.rng, call)
        if not isinstance(text, str):
            raise TypeError(f"agent task {self.task.name}: sample_reply returned {text!r}; return the reply's text")
        ids = self.chat.encode(text)[: params.max_tokens]
        finish = "length"
        if len(ids) < params.max_tokens and self.chat.stop_token_ids:
            ids, finish = ids + [self.chat.stop_token_ids[0]], "stop"
        return GenerationResult(token_ids=ids, logprobs=[0.0] * len(ids), versions=[0] * len(ids),
                                finish_reason=finish)

    def release(self, trajectory_id: str) -> None:
        self.calls.pop(trajectory_id, None)


class AgentTranscripts:
    """Random-reply runs of one agent task (it must have a ``sample_reply``), as token rows (see module docstring).
    Runs the gateway on an event loop of its own thread, so it works from synchronous code and from inside a
    running loop alike."""

    def __init__(self, task: AgentTask, tokenizer: Any, rng: np.random.Generator) -> None:
        self.task, self.rng = task, rng
        # An HTTP client the agent leaves open closes itself when collected, on the loop of the thread that collects
        # it, so it must be collected here, on the loop it was made on: automatic collection (in any thread) is off
        # while this runs, and each run's young garbage is collected on this loop (cheap: generations 0 and 1).
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="warmup-gateway", daemon=True)
        self._thread.start()
        try:
            self.gateway = self._call(Gateway(ReplySampler(task, tokenizer, rng), tokenizer).start())
        except BaseException:
            self._stop_loop()
            raise
        self.runner = AgentRunner(self.gateway)
        self._count = 0

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def episode(self) -> list[tuple[list[int], list[int]]]:
        """The token ids and loss mask of each segment of one agent run."""
        self._count += 1
        seed = int(self.rng.integers(2**31))
        traj = self._call(self.runner.run(self.task, f"warmup-{self._count}", f"warmup-{self._count}", seed))
        self._call(self._collect_young())
        if traj.status != "done":
            raise RuntimeError(f"agent task {self.task.name}: a format warm-up run of the agent ended "
                               f"{traj.status}: {traj.reason}")
        earlier = [(s["token_ids"], s["loss_mask"]) for s in traj.info.get("segments", [])]
        return earlier + [(list(traj.token_ids), list(traj.loss_mask))]

    @staticmethod
    async def _collect_young() -> None:
        gc.collect(1)

    async def _shut(self) -> None:
        await self.gateway.close()
        gc.collect()
        await asyncio.sleep(0)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.gather(*others, return_exceptions=True)

    def close(self) -> None:
        try:
            self._call(self._shut())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        if self._gc_was_enabled:
            gc.enable()
