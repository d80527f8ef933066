"""The mock's tool loop (switch `tool_loop`): one call of a tool a real coding agent runs, then a
text answer once the tool's result comes back, as a model would. Never a second call: an agent
that runs the tool gets an answer, never an endless loop.

The call is to a tool the agents really have, with input their tool accepts: Claude Code's
`Bash` ({"command": "echo …"}), Codex's `exec_command` ({"cmd": "echo …"}), `shell`
({"command": ["echo", "…"]}) or its JavaScript `exec` (`text("…")`); with none of them, the first tool with an empty input. The answer
after the result quotes the start of the result's text, so a test sees the loop closed.
Pure functions over the request's parts; each route's handler renders them in its own shape.
"""
from __future__ import annotations

MARK = "upgate-tool-loop"  # what the tool prints, and the answer quotes
_QUOTE = 120  # characters of the tool's result the answer repeats

# tool name → the input that runs `echo MARK` in it
_KNOWN = {
    "Bash": {"command": f"echo {MARK}", "description": "Print a marker"},
    "exec_command": {"cmd": f"echo {MARK}"},
    "shell_command": {"command": f"echo {MARK}"},
    "shell": {"command": ["echo", MARK]},
    # Codex's JavaScript `exec` (a custom tool, offered to a chat model as a function of one
    # string, `input`): its text() helper is the output
    "exec": {"input": f'text("{MARK}")'},
}


def call(names: list[str]) -> tuple[str, dict] | None:
    """(tool name, input) to call among the request's tool names; None without tools."""
    for name, args in _KNOWN.items():
        if name in names:
            return name, dict(args)
    return (names[0], {}) if names else None


def answer(result: str) -> list[str]:
    """The text answer after a tool result, in pieces (one a stream chunk, one output token)."""
    quoted = " ".join(result.split())[:_QUOTE] or "(no output)"
    return ["The ", "tool ", "said: ", quoted]


def text_of(content) -> str:
    """A tool result's text, whatever its shape (a string, or parts with `text`/`output`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(text_of(p) for p in content)
    if isinstance(content, dict):
        for field in ("text", "output", "content"):
            if field in content:
                return text_of(content[field])
    return ""
