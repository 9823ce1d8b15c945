"""Model-free stand-ins for tests and benchmarks: a byte tokenizer with a ChatML template and a
scripted policy with the same ``generate`` interface as :class:`rollart.rollout.proxy.LLMProxy`.

The scripted policy reads the last user message out of the prompt, asks ``choose(trajectory_id,
observation)`` for the action text, waits ``latency_s`` (standing in for the LLM's time; cancellable,
so cancelling a trajectory aborts its "generation" exactly like the real proxy) and returns the
action's token ids followed by the end-of-turn token.
"""
from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from typing import Callable

from rollart.types import GenerationResult, SamplingParams

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = "chatml"
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIALS) + ")")  # ByteTokenizer renders ChatML natively; the attribute only has to be non-empty


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255 plus ChatML special tokens (256+); enough for ChatFormat."""

    chat_template = CHATML

    def __init__(self) -> None:
        self.special_ids = {tok: 256 + i for i, tok in enumerate(SPECIALS)}
        self.id_to_special = {i: tok for tok, i in self.special_ids.items()}
        self.eos_token_id = self.special_ids["<|im_end|>"]
        self.vocab_size = 256 + len(SPECIALS)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if "<|" not in text:  # no special token can occur: plain UTF-8 bytes
            return list(text.encode())
        ids: list[int] = []
        for piece in _SPECIAL_SPLIT.split(text):
            special = self.special_ids.get(piece)
            if special is not None:
                ids.append(special)
            elif piece:
                ids.extend(piece.encode())
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        if not ids or max(ids) < 256:  # no special token: one bytes() call instead of a loop
            return bytes(ids).decode(errors="replace")
        out, start = [], 0
        for i in [i for i, t in enumerate(ids) if t >= 256]:  # only the special tokens' positions
            out.append(bytes(ids[start:i]).decode(errors="replace"))
            if not skip_special_tokens:
                out.append(self.id_to_special[ids[i]])
            start = i + 1
        out.append(bytes(ids[start:]).decode(errors="replace"))
        return "".join(out)

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.special_ids[token]

    def apply_chat_template(self, messages: list[dict], tokenize: bool = False,
                            add_generation_prompt: bool = False) -> str | list[int]:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self.encode(text) if tokenize else text


def last_user_message(prompt_text: str) -> str:
    """The content of the last ChatML user message in ``prompt_text``."""
    tail = prompt_text.rsplit("<|im_start|>user\n", 1)[-1]
    return tail.split("<|im_end|>", 1)[0]


_USER_HEADER = list(b"user\n")

Chooser = Callable[[str, str], str]


def random_chooser(options: list[str], seed: int = 0) -> Chooser:
    rng = random.Random(seed)
    return lambda trajectory_id, observation: rng.choice(options)


class ScriptedPolicy:
    """``generate(trajectory_id, prompt_token_ids, sampling, task)`` without a model (see module doc)."""

    def __init__(self, tokenizer, choose: Chooser, latency_s: float = 0.0,
                 version: Callable[[], int] = lambda: 0, logprob: float = -0.5):
        self.tokenizer = tokenizer
        self.choose = choose
        self.latency_s = latency_s
        self.version = version
        self.logprob = logprob
        self.stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.start_id = tokenizer.convert_tokens_to_ids("<|im_start|>")
        self.counters: Counter = Counter()
        self.inflight: set[str] = set()
        self.tasks: Counter = Counter()

    def release(self, trajectory_id: str) -> None:
        """Nothing is kept per trajectory."""

    async def generate(self, trajectory_id: str, prompt_token_ids: list[int],
                       sampling: SamplingParams | None = None, task: str = "default") -> GenerationResult:
        sampling = sampling or SamplingParams()
        self.counters["requests"] += 1
        self.tasks[task] += 1
        self.inflight.add(trajectory_id)
        try:
            if self.latency_s > 0:
                await asyncio.sleep(self.latency_s)
            action = self.choose(trajectory_id, self.last_user_message(prompt_token_ids))
        except asyncio.CancelledError:
            self.counters["cancelled"] += 1
            raise
        finally:
            self.inflight.discard(trajectory_id)
        ids = (self.tokenizer.encode(action) + [self.stop_id])[:sampling.max_tokens]
        version = self.version()
        return GenerationResult(token_ids=ids, logprobs=[self.logprob] * len(ids),
                                versions=[version] * len(ids),
                                finish_reason="stop" if ids[-1] == self.stop_id else "length",
                                text=action, num_prompt_tokens=len(prompt_token_ids))

    def last_user_message(self, prompt_token_ids: list[int]) -> str:
        """Decode only the last user message: the ids between the second-to-last '<|im_start|>' (the
        last opens the assistant turn being generated) and the '<|im_end|>' after it."""
        tail = prompt_token_ids[-4096:]
        reversed_ids = tail[::-1]
        try:
            last = reversed_ids.index(self.start_id)
            before = reversed_ids.index(self.start_id, last + 1)
        except ValueError:
            before = len(tail) - 1
        start = len(tail) - 1 - before
        try:
            end = tail.index(self.stop_id, start + 1)
        except ValueError:
            end = len(tail)
        message = tail[start + 1:end]  # "user\n" + content, as bytes when no special token is inside
        if message[:5] == _USER_HEADER and (not message or max(message) < 256):
            return bytes(message[5:]).decode(errors="replace")
        return last_user_message(self.tokenizer.decode(tail[start:]))  # anything unusual: the text way

    async def abort(self, trajectory_id: str) -> int:
        self.counters["abort_calls"] += 1
        return 0

    def release(self, trajectory_id: str) -> None:
        self.counters["released"] += 1
