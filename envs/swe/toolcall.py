"""Tool calls parsed from model text, in the one format Qwen/Hermes chat templates emit::

    <tool_call>
    {"name": "edit", "arguments": {"path": "pkg/mod.py", "old_str": "x - 1", "new_str": "x"}}
    </tool_call>

Several calls in one message run in order. ``arguments`` may also be a JSON-encoded string (some
models emit that). Anything malformed becomes a :class:`ToolCallError` whose message tells the model
what was wrong and what the format is — the env turns it into an observation, never a crash.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
FORMAT_HINT = ('Call a tool as <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call> '
               "with valid JSON inside the tags.")


class ToolCallError(ValueError):
    """The model's text held no usable tool call; the message is shown to the model."""


@dataclass
class ToolCall:
    name: str
    arguments: dict


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>`` in ``text``; raises ToolCallError if there is none or one is malformed."""
    if not isinstance(text, str):
        raise ToolCallError(f"action must be text, got {type(text).__name__}. {FORMAT_HINT}")
    bodies = _CALL.findall(text)
    if not bodies:
        if "<tool_call>" in text:
            raise ToolCallError(f"found <tool_call> without a closing </tool_call>. {FORMAT_HINT}")
        raise ToolCallError(f"no tool call found in your message. {FORMAT_HINT}")
    calls = []
    for n, body in enumerate(bodies, 1):
        try:
            obj = json.loads(body.strip())
        except json.JSONDecodeError as e:
            raise ToolCallError(f"tool call {n}: invalid JSON ({e.msg} at char {e.pos}). {FORMAT_HINT}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise ToolCallError(f'tool call {n}: expected an object with a string "name". {FORMAT_HINT}')
        args = obj.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                raise ToolCallError(f'tool call {n}: "arguments" is a string that is not JSON. {FORMAT_HINT}') from None
        if not isinstance(args, dict):
            raise ToolCallError(f'tool call {n}: "arguments" must be an object. {FORMAT_HINT}')
        calls.append(ToolCall(obj["name"], args))
    return calls


def format_tool_call(name: str, **arguments) -> str:
    """The text a model (or a scripted agent) writes to call ``name``."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
