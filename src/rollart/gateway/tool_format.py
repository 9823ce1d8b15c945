"""How tool calls and tool results look to the model, and how the gateway reads them back.

Chat templates of small models (the tiny model's ChatML template, SmolLM2's) know nothing of tools, so the
gateway renders them as plain text inside the messages the template already handles:

- the tools offered (``tools=[...]`` in the request) become a system message, one line per tool:
  ``Tools: name(param, ...) - description`` and how to call one;
- a tool call the model makes is the text ``<tool>NAME ARGS</tool>`` in the assistant turn, where ARGS is a
  JSON object (``<tool>lookup {"key": "a"}</tool>``) or, for a one-parameter tool, plain text
  (``<tool>lookup a</tool>`` gives ``{"<that parameter>": "a"}``); NAME may be left out when one tool is offered;
- an assistant message with ``tool_calls`` is rendered back to that same text, and a ``role: tool`` message
  is a turn of role ``tool`` whose content is the result.

The tags are a :class:`ToolSyntax` (default ``<tool>`` / ``</tool>``), chosen per task: a model trained from
scratch learns a one-token opener far sooner (``ToolSyntax("@", "")``: ``@NAME ARGS`` up to the end of the answer).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


class ToolFormatError(ValueError):
    """A request's tools or messages cannot be rendered (the message names the field)."""


@dataclass(frozen=True)
class ToolSyntax:
    """The text around a tool call: ``open`` NAME ARGS ``close`` (an empty ``close``: to the end of the answer)."""
    open: str = "<tool>"
    close: str = "</tool>"

    def __post_init__(self) -> None:
        if not self.open:
            raise ToolFormatError("ToolSyntax.open must not be empty")

    @property
    def pattern(self) -> "re.Pattern":
        end = f"(?:{re.escape(self.close)}|$)" if self.close else "$"
        return re.compile(f"{re.escape(self.open)}(.*?){end}", re.S)


@dataclass
class ToolCall:
    name: str
    arguments: str
    """JSON text of the arguments, as the OpenAI API carries them."""


def tools_prompt(tools: list[dict], syntax: ToolSyntax = ToolSyntax()) -> str:
    """The system text that offers ``tools`` (OpenAI ``tools`` entries of type function)."""
    lines = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ToolFormatError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}")
        params = list((fn.get("parameters") or {}).get("properties", {}))
        desc = f" - {fn['description']}" if fn.get("description") else ""
        lines.append(f"Tools: {fn['name']}({', '.join(params)}){desc}")
    lines.append(f"Call a tool with {syntax.open}NAME ARGS{syntax.close}.")
    return "\n".join(lines)


def render_call(call: dict, syntax: ToolSyntax = ToolSyntax()) -> str:
    """An OpenAI ``tool_calls`` entry as the text the model writes for it."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ToolFormatError("an assistant tool_calls entry needs function.name and function.arguments")
    args = fn.get("arguments") or "{}"
    try:
        parsed = json.loads(args)
    except json.JSONDecodeError:
        raise ToolFormatError(f"tool call {fn['name']!r}: arguments is not JSON: {args[:80]!r}") from None
    return f"{syntax.open}{fn['name']} {json.dumps(parsed, separators=(',', ':'))}{syntax.close}"


def parse_calls(text: str, tools: list[dict], syntax: ToolSyntax = ToolSyntax()) -> tuple[str, list[ToolCall]]:
    """(content outside the tool tags, tool calls) of a model's answer; no tools offered: no calls."""
    if not tools or syntax.open not in text:
        return text, []
    pattern = syntax.pattern
    specs = {t["function"]["name"]: t["function"] for t in tools}
    calls = []
    for body in pattern.findall(text):
        name, _, rest = body.strip().partition(" ")
        if name not in specs:
            if len(specs) != 1:
                continue  # not a tool the request offered: left as text
            name, rest = next(iter(specs)), body.strip()
        calls.append(ToolCall(name, _arguments(rest.strip(), specs[name])))
    content = pattern.sub("", text).strip()
    return content, calls


def forced_tool(tool_choice: Any, tools: list[dict]) -> str | None:
    """The tool a request's ``tool_choice`` makes the assistant call ("required", or a named function), or None
    when the model decides ("auto", "none", absent). Only a tool that takes no arguments can be forced: its call is
    then fully determined and the gateway writes it without the model (see ``Gateway``)."""
    if tool_choice in (None, "auto", "none"):
        return None
    specs = {t["function"].get("name"): t["function"] for t in tools
             if isinstance(t, dict) and isinstance(t.get("function"), dict)}
    names = list(specs)
    if tool_choice == "required":
        if len(names) != 1:
            raise ToolFormatError(f"tool_choice='required' with {len(names)} tools leaves the choice to the model; "
                                  "name the tool ({'type': 'function', 'function': {'name': ...}}) or use 'auto'")
        name = names[0]
    elif isinstance(tool_choice, dict) and isinstance((tool_choice.get("function") or {}).get("name"), str):
        name = tool_choice["function"]["name"]
        if name not in names:
            raise ToolFormatError(f"tool_choice names {name!r}, which is not among the request's tools {names}")
    else:
        raise ToolFormatError("tool_choice must be 'auto', 'none', 'required' or {'type': 'function', "
                              f"'function': {{'name': ...}}}}, not {tool_choice!r}")
    if (specs[name].get("parameters") or {}).get("properties"):
        raise ToolFormatError(f"tool_choice forces {name!r}, which takes arguments: the gateway can only force a "
                              "call it can write whole (a tool without parameters); use tool_choice='auto'")
    return name


def _arguments(rest: str, spec: dict) -> str:
    if rest.startswith("{"):
        try:
            return json.dumps(json.loads(rest))
        except json.JSONDecodeError:
            pass
    params = list((spec.get("parameters") or {}).get("properties", {}))
    if len(params) == 1:
        return json.dumps({params[0]: rest})
    return json.dumps({"input": rest} if rest else {})


def message_text(message: dict, index: int, syntax: ToolSyntax = ToolSyntax()) -> tuple[str, str]:
    """(role, text) of one request message as the template renders it (tool calls as ``<tool>`` text)."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ToolFormatError(f"messages[{index}] must be an object with a 'role'")
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    text = content if isinstance(content, str) else ""
    calls = message.get("tool_calls") or []
    if calls:
        text = (text + "".join(render_call(c, syntax) for c in calls)).strip()
    return message["role"], text
