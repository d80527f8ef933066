"""Collect streamed chunks into the one JSON object a non-streaming client expects.

The gateway may ask upstream for a stream even when the client did not (byte-level
liveness, exact partial accounting); this turns the `chat.completion.chunk` (or legacy
`text_completion`) events back into a `chat.completion` (or `text_completion`) object.
"""

import time
from typing import Any, Iterable

# Top-level chunk keys rebuilt here; every other key (provider, system_fingerprint,
# service_tier, vendor extras) is carried over as the provider sent it.
_REBUILT = frozenset(("object", "choices", "usage"))


class _Choice:
    __slots__ = ("index", "role", "content", "refusal", "reasoning", "reasoning_details",
                 "tool_calls", "function_call", "text", "finish_reason", "logprobs", "extra")

    def __init__(self, index: int) -> None:
        self.index = index
        self.role: str | None = None
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_details: list[Any] = []
        self.tool_calls: dict[int, dict] = {}
        self.function_call: dict | None = None
        self.text: list[str] = []
        self.finish_reason: str | None = None
        self.logprobs: dict | None = None
        self.extra: dict = {}


class Assembler:
    """Add chunk dicts in arrival order, then call `result()`."""

    def __init__(self) -> None:
        self.legacy = False  # text_completion chunks (POST /v1/completions)
        self.usage: dict | None = None
        self._top: dict = {}
        self._choices: dict[int, _Choice] = {}

    def add(self, chunk: dict) -> None:
        if chunk.get("object") == "text_completion":
            self.legacy = True
        for key, value in chunk.items():
            if key not in _REBUILT and value is not None:
                self._top.setdefault(key, value)  # id, model, created: the first one wins
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        for raw in chunk.get("choices") or ():
            index = raw.get("index", 0)
            choice = self._choices.get(index)
            if choice is None:
                choice = self._choices[index] = _Choice(index)
            self._add_choice(choice, raw)

    def _add_choice(self, choice: _Choice, raw: dict) -> None:
        for key, value in raw.items():
            if key == "delta":
                if value:
                    self._add_delta(choice, value)
            elif key == "text":
                if value:
                    choice.text.append(value)
                self.legacy = True
            elif key == "finish_reason":
                if value is not None:
                    choice.finish_reason = value
            elif key == "logprobs":
                if value:
                    _merge_logprobs(choice, value)
            elif key not in ("index", "message") and value is not None:
                choice.extra[key] = value  # e.g. openrouter's native_finish_reason

    @staticmethod
    def _add_delta(choice: _Choice, delta: dict) -> None:
        role = delta.get("role")
        if role:
            choice.role = role
        for key in ("content", "refusal", "reasoning"):
            piece = delta.get(key)
            if piece:
                getattr(choice, key).append(piece)
        details = delta.get("reasoning_details")
        if details:
            choice.reasoning_details.extend(details)
        for call in delta.get("tool_calls") or ():
            index = call.get("index", len(choice.tool_calls))
            merged = choice.tool_calls.get(index)
            if merged is None:
                merged = choice.tool_calls[index] = {
                    "id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            if call.get("id"):
                merged["id"] = call["id"]
            if call.get("type"):
                merged["type"] = call["type"]
            function = call.get("function") or {}
            if function.get("name"):
                merged["function"]["name"] += function["name"]
            if function.get("arguments"):
                merged["function"]["arguments"] += function["arguments"]
        function_call = delta.get("function_call")  # the deprecated single-function form
        if function_call:
            if choice.function_call is None:
                choice.function_call = {"name": "", "arguments": ""}
            choice.function_call["name"] += function_call.get("name") or ""
            choice.function_call["arguments"] += function_call.get("arguments") or ""

    def result(self) -> dict:
        out = dict(self._top)
        out.setdefault("id", "")
        out.setdefault("model", "")
        out.setdefault("created", int(time.time()))
        choices = [self._choices[i] for i in sorted(self._choices)]
        if self.legacy:
            out["object"] = "text_completion"
            out["choices"] = [_legacy_choice(c) for c in choices]
        else:
            out["object"] = "chat.completion"
            out["choices"] = [_chat_choice(c) for c in choices]
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def assemble(chunks: Iterable[dict]) -> dict:
    """The non-stream object for a whole list of chunks."""
    assembler = Assembler()
    for chunk in chunks:
        assembler.add(chunk)
    return assembler.result()


def _merge_logprobs(choice: _Choice, logprobs: dict) -> None:
    if choice.logprobs is None:
        choice.logprobs = {}
    for key, value in logprobs.items():
        if isinstance(value, list):
            choice.logprobs.setdefault(key, []).extend(value)
        else:
            choice.logprobs[key] = value


def _chat_choice(choice: _Choice) -> dict:
    message: dict[str, Any] = {
        "role": choice.role or "assistant",
        # content is null only for a pure tool/function call, as OpenAI sends it
        "content": "".join(choice.content)
        if choice.content or not (choice.tool_calls or choice.function_call) else None,
        "refusal": "".join(choice.refusal) if choice.refusal else None,
    }
    if choice.reasoning:
        message["reasoning"] = "".join(choice.reasoning)
    if choice.reasoning_details:
        message["reasoning_details"] = choice.reasoning_details
    if choice.tool_calls:
        message["tool_calls"] = [choice.tool_calls[i] for i in sorted(choice.tool_calls)]
    if choice.function_call is not None:
        message["function_call"] = choice.function_call
    out = {
        "index": choice.index,
        "message": message,
        # a stream that never said why it stopped (some providers) ended normally
        "finish_reason": choice.finish_reason or "stop",
        "logprobs": choice.logprobs,
    }
    out.update(choice.extra)
    return out


def _legacy_choice(choice: _Choice) -> dict:
    out = {
        "index": choice.index,
        "text": "".join(choice.text),
        "finish_reason": choice.finish_reason or "stop",
        "logprobs": choice.logprobs,
    }
    out.update(choice.extra)
    return out
