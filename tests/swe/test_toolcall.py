"""Tool-call parsing from model text (Qwen/Hermes <tool_call> JSON) and unified-diff handling."""
import pytest

from envs.swe.patch import PatchError, apply_file_patch, parse_patch, patched_files
from envs.swe.toolcall import ToolCallError, format_tool_call, parse_tool_calls


def test_parses_one_and_several_calls():
    text = 'I will look.\n<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>'
    [call] = parse_tool_calls(text)
    assert call.name == "view" and call.arguments == {"path": "a.py"}
    two = format_tool_call("bash", command="ls") + "\nthen\n" + format_tool_call("submit")
    assert [c.name for c in parse_tool_calls(two)] == ["bash", "submit"]


def test_arguments_as_json_string_accepted():
    [call] = parse_tool_calls('<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>')
    assert call.arguments == {"command": "ls"}


@pytest.mark.parametrize("text, message", [
    ("just prose", "no tool call"),
    ('<tool_call>{"name": "bash"', "without a closing"),
    ("<tool_call>{not json}</tool_call>", "invalid JSON"),
    ('<tool_call>["bash"]</tool_call>', '"name"'),
    ('<tool_call>{"name": 3}</tool_call>', '"name"'),
    ('<tool_call>{"name": "bash", "arguments": [1]}</tool_call>', "must be an object"),
    ('<tool_call>{"name": "bash", "arguments": "nope"}</tool_call>', "not JSON"),
    (None, "must be text"),
])
def test_malformed_calls_raise_with_a_helpful_message(text, message):
    with pytest.raises(ToolCallError, match=message) as e:
        parse_tool_calls(text)
    assert "<tool_call>" in str(e.value)  # every message repeats the format


DIFF = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -1,3 +1,3 @@
 a = 1
-b = 2
+b = 3
 c = 4
--- /dev/null
+++ b/new.py
@@ -0,0 +1,2 @@
+x = 1
+y = 2
"""


def test_patch_parse_and_apply():
    files = parse_patch(DIFF)
    assert [f.path for f in files] == ["m.py", "new.py"]
    assert files[1].old_path is None
    out = patched_files(DIFF, lambda p: {"m.py": "a = 1\nb = 2\nc = 4\n"}.get(p))
    assert out == {"m.py": "a = 1\nb = 3\nc = 4\n", "new.py": "x = 1\ny = 2\n"}
    assert files[0].hunks[0].old_text == "a = 1\nb = 2\nc = 4\n"


def test_patch_that_does_not_apply_raises():
    with pytest.raises(PatchError, match="does not apply"):
        apply_file_patch("something else\n", parse_patch(DIFF)[0])
    with pytest.raises(PatchError, match="no file headers"):
        parse_patch("not a diff")
