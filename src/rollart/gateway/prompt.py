"""Chat messages to prompt token ids, re-using the exact ids of earlier calls (token-in/token-out).

An agent sends the whole conversation every call. Re-tokenising it would turn the model's own tokens into
possibly different ones (BPE may merge a generated sequence differently), so the trajectory would train on
tokens the model never sampled. Instead, when a call's messages start with the previous call's messages plus
the assistant message the gateway returned, the prompt is the previous prompt + completion ids as they were,
then the rest of the assistant turn's closing and the new messages, tokenised from the template's own text
(:class:`rollart.rollout.chat.ChatFormat` derives those pieces and refuses templates that cannot be extended).
Anything else is rendered in full; :class:`~rollart.gateway.record.TrajectoryRecord` then forks if it does not
extend the previous sequence.
"""
from __future__ import annotations

from typing import Any

from rollart.gateway.tool_format import ToolSyntax, message_text, tools_prompt
from rollart.rollout.chat import ChatFormat


class ChatPrompter:
    """Builds one trajectory's chat prompts (see module docstring)."""

    def __init__(self, chat: ChatFormat, syntax: ToolSyntax = ToolSyntax()) -> None:
        self.chat, self.syntax = chat, syntax
        self.tokenizer = chat.tokenizer
        self._prev: list[tuple[str, str]] | None = None
        """Messages of the previous call plus the assistant reply it returned, as (role, text)."""
        self._prev_ids: list[int] = []
        """That call's prompt + completion ids."""

    def messages(self, messages: list[dict], tools: list[dict] | None) -> list[tuple[str, str]]:
        msgs = [message_text(m, i, self.syntax) for i, m in enumerate(messages)]
        if tools:
            msgs.insert(1 if msgs and msgs[0][0] == "system" else 0, ("system", tools_prompt(tools, self.syntax)))
        return msgs

    def prompt_ids(self, msgs: list[tuple[str, str]]) -> list[int]:
        prev = self._prev
        if prev is not None and len(msgs) > len(prev) and msgs[:len(prev)] == prev:
            closed = self._render(prev, False)
            full = self._render(msgs, True)
            if full.startswith(closed):
                return self._prev_ids + self._after_completion() + self.chat.encode(full[len(closed):])
        return self.chat.encode(self._render(msgs, True))

    def remember(self, msgs: list[tuple[str, str]], reply: tuple[str, str], prompt_ids: list[int],
                 completion_ids: list[int]) -> None:
        """After a call: what the next call must start with to re-use these ids."""
        self._prev = msgs + [reply]
        self._prev_ids = list(prompt_ids) + list(completion_ids)

    def _after_completion(self) -> list[int]:
        """The rest of the assistant turn's closing after the generated ids (e.g. '\\n' after <|im_end|>)."""
        return self.chat.encode(self.chat.closing_after(self._prev_ids[-1:]))

    def _render(self, msgs: list[tuple[str, str]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template([{"role": r, "content": t} for r, t in msgs], tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)


def completion_prompt_ids(tokenizer: Any, prompt: Any, prev_text: str | None, prev_ids: list[int]) -> list[int]:
    """``/v1/completions``: token ids given as such are used as they are; a string that extends the previous
    call's prompt + completion text re-uses that call's ids and tokenises only the rest."""
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("prompt must be a non-empty string or a list of token ids")
    if prev_text is not None and prompt.startswith(prev_text) and len(prompt) > len(prev_text):
        return prev_ids + _encode(tokenizer, prompt[len(prev_text):])
    return _encode(tokenizer, prompt)


def _encode(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return list(ids)
