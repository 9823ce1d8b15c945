"""The agent's tools in the SWE env: bash, view, create, edit, run_tests, submit.

File tools run on the host through symlink-safe calls (``rollart.sandbox.safefs``); commands run in
the episode's sandbox. Every tool returns text; every failure is a message, never an exception.
"""
from __future__ import annotations

from dataclasses import dataclass

from rollart.sandbox import Sandbox, UnsafePathError

TOOL_SCHEMAS = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command in the repository (no network; killed after a timeout).",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "view", "description": "Show a file with line numbers, optionally only lines start_line..end_line (1-based, inclusive).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"},
                                                        "end_line": {"type": "integer"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "create", "description": "Create a file (or overwrite it) with the given content.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "edit", "description": "Replace old_str by new_str in a file; old_str must occur exactly once.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old_str": {"type": "string"},
                                                        "new_str": {"type": "string"}},
                       "required": ["path", "old_str", "new_str"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the repository's visible tests.",
        "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Finish: your workspace is graded by hidden tests.",
        "parameters": {"type": "object", "properties": {}}}},
]
TOOL_NAMES = [t["function"]["name"] for t in TOOL_SCHEMAS]


@dataclass
class ToolResult:
    text: str
    error: bool = False
    submit: bool = False


class SWETools:
    """Executes tool calls against one episode's sandbox."""

    def __init__(self, sandbox: Sandbox, test_cmd: str, *, view_max_bytes: int = 1 << 20,
                 test_timeout_s: float = 60.0) -> None:
        self.sandbox = sandbox
        self.test_cmd = test_cmd
        self.view_max_bytes = view_max_bytes
        self.test_timeout_s = test_timeout_s

    def call(self, name: str, args: dict) -> ToolResult:
        handler = getattr(self, f"tool_{name}", None) if name in TOOL_NAMES else None
        if handler is None:
            return ToolResult(f"error: unknown tool {name!r}; available: {', '.join(TOOL_NAMES)}", error=True)
        schema = next(t["function"]["parameters"] for t in TOOL_SCHEMAS if t["function"]["name"] == name)
        missing = [k for k in schema.get("required", []) if k not in args]
        if missing:
            return ToolResult(f"error: {name} needs argument(s) {missing}", error=True)
        for key, spec in schema["properties"].items():
            want = str if spec["type"] == "string" else int
            if key in args and not (isinstance(args[key], want) and not isinstance(args[key], bool)):
                return ToolResult(f"error: {name}.{key} must be a {spec['type']}", error=True)
        try:
            return handler(**{k: v for k, v in args.items() if k in schema["properties"]})
        except (UnsafePathError, FileNotFoundError, IsADirectoryError, ValueError, OSError) as e:
            return ToolResult(f"error: {e}", error=True)

    def tool_bash(self, command: str) -> ToolResult:
        r = self.sandbox.run(command)
        return ToolResult(r.observation(), error=not r.ok)

    def tool_view(self, path: str, start_line: int | None = None, end_line: int | None = None) -> ToolResult:
        data, size = self.sandbox.read_file(path, self.view_max_bytes)
        lines = data.decode("utf-8", "replace").splitlines()
        lo = max(1, start_line or 1)
        hi = min(len(lines), end_line or len(lines))
        if lines and lo > len(lines):
            return ToolResult(f"error: {path} has {len(lines)} lines; start_line={lo} is past the end", error=True)
        body = "\n".join(f"{n:6d}\t{lines[n - 1]}" for n in range(lo, hi + 1))
        note = f"\n[file is {size} bytes; only the first {len(data)} were read]" if size > len(data) else ""
        return ToolResult((body or "[empty file]") + note)

    def tool_create(self, path: str, content: str) -> ToolResult:
        self.sandbox.write_file(path, content.encode("utf-8"))
        return ToolResult(f"wrote {path} ({len(content.splitlines())} lines)")

    def tool_edit(self, path: str, old_str: str, new_str: str) -> ToolResult:
        if not old_str:
            return ToolResult("error: old_str is empty; use create to write a whole file", error=True)
        data, size = self.sandbox.read_file(path, self.view_max_bytes)
        if size > len(data):
            return ToolResult(f"error: {path} is larger than {self.view_max_bytes} bytes; edit it with bash", error=True)
        text = data.decode("utf-8", "replace")
        count = text.count(old_str)
        if count != 1:
            return ToolResult(f"error: old_str occurs {count} times in {path}; it must occur exactly once "
                              "(add surrounding lines to make it unique)", error=True)
        self.sandbox.write_file(path, text.replace(old_str, new_str, 1).encode("utf-8"))
        return ToolResult(f"edited {path}")

    def tool_run_tests(self) -> ToolResult:
        r = self.sandbox.run(self.test_cmd, timeout_s=self.test_timeout_s)
        return ToolResult(r.observation(), error=not r.ok)

    def tool_submit(self) -> ToolResult:
        return ToolResult("submitted", submit=True)
