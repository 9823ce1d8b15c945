"""Token-in/token-out chat formatting for multi-turn trajectories.

The model's generated token ids are appended to the trajectory as they are — never decoded and
re-tokenized — so turn k+1's prompt extends turn k's prompt plus output exactly (the prefix cache of
the inference engine depends on it, and so does training on exactly the sampled tokens). Only the
text around them (end of the assistant turn, the next user message, the next assistant header) is
tokenized, from strings derived once from the tokenizer's own chat template:

    first prompt  = template([system, user obs], add_generation_prompt)
    after output  = rest of the assistant turn's closing (e.g. "\\n" after a generated <|im_end|>)
                    + template's next user turn + assistant header

The template must render a conversation as a prefix of the same conversation extended by a turn
(ChatML and Llama-3 style templates do); otherwise :class:`ChatFormat` refuses it with a clear error.
"""
from __future__ import annotations

from typing import Any

_PROBE_USER = "\x01probe-user\x01"
_PROBE_REPLY = "\x01probe-reply\x01"
_PROBE_NEXT = "\x02probe-next\x02"


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be extended turn by turn (see module docstring)."""


class ChatFormat:
    """Builds a trajectory's token ids turn by turn from a tokenizer with a chat template."""

    def __init__(self, tokenizer: Any, system_prompt: str = ""):
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        base = self._messages(_PROBE_USER)
        opened = self._render(base, add_generation_prompt=True)
        closed = self._render(base + [{"role": "assistant", "content": _PROBE_REPLY}], False)
        extended = self._render(base + [{"role": "assistant", "content": _PROBE_REPLY},
                                        {"role": "user", "content": _PROBE_NEXT}], True)
        if not closed.startswith(opened + _PROBE_REPLY) or not extended.startswith(closed):
            raise ChatTemplateError(
                "the chat template does not render a conversation as a prefix of its continuation, so "
                "turns cannot be appended token-in/token-out; use a ChatML-style template")
        self.closing = closed[len(opened) + len(_PROBE_REPLY):]
        """Text that ends an assistant turn (e.g. '<|im_end|>\\n')."""
        before, after = extended[len(closed):].split(_PROBE_NEXT)
        self.user_prefix, self.user_suffix = before, after
        self.stop_token_ids = self._stop_ids()
        """Token ids that end a model turn (the closing's first special token and the eos token)."""
        self._stop_set = frozenset(self.stop_token_ids)
        self._closing_after = {}
        """What of the closing is left to append after each stop token (decoded once, not per turn)."""
        for stop in self.stop_token_ids:
            stop_text = tokenizer.decode([stop], skip_special_tokens=False)
            self._closing_after[stop] = (self.closing[len(stop_text):] if self.closing.startswith(stop_text)
                                         else self.closing)

    # ------------------------------------------------------------------ building
    def first_prompt(self, observation: str) -> list[int]:
        """Token ids of [system, user(observation)] plus the assistant header."""
        text = self._render(self._messages(observation), add_generation_prompt=True)
        return self.encode(text)

    def next_turn(self, observation: str, output_ids: list[int]) -> list[int]:
        """Token ids to append after a model output so that the next assistant turn can start."""
        return self.encode(self.closing_after(output_ids) + self.user_prefix + observation + self.user_suffix)

    def closing_after(self, output_ids: list[int]) -> str:
        """What of the assistant turn's closing is left to append after a model output."""
        return self._closing_after.get(output_ids[-1], self.closing) if output_ids else self.closing

    def action_text(self, output_ids: list[int]) -> str:
        """The model output as an action string (stop tokens and special tokens dropped)."""
        stops = self._stop_set
        ids = [t for t in output_ids if t not in stops]
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return ids if type(ids) is list else list(ids)

    # ------------------------------------------------------------------ helpers
    def _messages(self, observation: str) -> list[dict]:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return messages + [{"role": "user", "content": observation}]

    def _render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat_template; load one that has "
                                    "(rollart.models.load_tokenizer gives a ChatML template)")
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def _stop_ids(self) -> list[int]:
        ids = []
        first = self.encode(self.closing)[:1]
        if first and self.tokenizer.decode(first, skip_special_tokens=True) == "":
            ids.append(first[0])  # a special token like <|im_end|>
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(eos, int) and eos not in ids:
            ids.append(eos)
        return ids
