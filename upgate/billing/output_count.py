"""What a provider's answer says it produced, for billing: its usage object's token counts, checked,
and, where it gives none (a cut stream, a provider without usage), the characters of output
relayed, from which tokens are estimated. Pure functions, shared by the JSON and stream relays.
"""
from __future__ import annotations


_MAX_TOKENS = 100_000_000  # per request and kind: more than any context window holds


def tokens_or(value, default: int) -> int:
    """A provider's token count, or `default` (our estimate) when it is not a plausible one:
    not an integer, negative, or beyond any model's reach (a cost past the money range would
    make the settlement fail and leave the answer uncharged)."""
    return value if type(value) is int and 0 <= value <= _MAX_TOKENS else default


def estimate_tokens(chars: int) -> int:
    """Estimate tokens from relayed characters (about four characters a token)."""
    return (chars + 3) // 4


def as_ours(obj: dict, model, name: str | None = None) -> None:
    """A provider's answer or chunk as the client sees it: the model named as the client asked
    for it (`name`: an alias it sent; else our id), the provider named (both stream paths and
    the JSON answer must agree)."""
    obj["model"] = name or model.id
    obj.setdefault("provider", model.provider)


def usage_tokens(usage: dict, prompt_estimate: int, chars: int) -> tuple[int, int]:
    """(prompt, completion) tokens of a provider's usage object; what it leaves out, estimated
    (the prompt by the request's one estimate, sizing.prompt_tokens of its body)."""
    return (tokens_or(usage.get("prompt_tokens"), prompt_estimate),
            tokens_or(usage.get("completion_tokens"), estimate_tokens(chars)))


def as_list(value) -> list:
    """A field that should hold a list: anything else counts as empty (a provider's odd shape
    must not crash the count a cut stream is billed by)."""
    return value if isinstance(value, list) else []


def chars_message(m: dict) -> int:
    """Characters of output in a message or a stream delta: text, reasoning, a refusal and
    tool-call arguments (a JSON answer without usage is billed by the same count as a stream)."""
    n = 0
    for field in ("content", "reasoning", "refusal"):
        v = m.get(field)
        if isinstance(v, str):
            n += len(v)
    for call in as_list(m.get("tool_calls")):
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
            n += len(fn["arguments"])
    return n


def chars_output(obj: dict, part: str) -> int:
    """Characters of output in an answer's choices: `part` is "message" for a JSON answer,
    "delta" for a stream chunk (plus a legacy completion's `text` in either)."""
    n = 0
    for choice in as_list(obj.get("choices")):
        if not isinstance(choice, dict):
            continue
        m = choice.get(part)
        if isinstance(m, dict):
            n += chars_message(m)
        text = choice.get("text")
        if isinstance(text, str):
            n += len(text)
    return n
