"""A chat-completions answer → the Messages API's Message (what a Messages client reads)."""
from __future__ import annotations

import orjson

# chat finish_reason → Messages stop_reason
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}


_NATIVE = frozenset(("end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"))


def stop_reason(finish: str | None, native: str | None = None) -> str:
    """The Messages stop_reason: a provider's own (`native_finish_reason`, as OpenRouter and the
    anthropic dialect report it) when it is one, else mapped from the chat finish_reason."""
    if native in _NATIVE:
        return native
    return STOP_REASONS.get(finish or "stop", "end_turn")


def stop_sequence(choice: dict) -> str | None:
    value = choice.get("stop_sequence")
    return value if isinstance(value, str) else None


def usage(chat_usage: dict | None) -> dict:
    """Messages usage from a chat usage object: Anthropic counts input tokens read from and
    written to its prompt cache apart from `input_tokens`; chat counts them inside
    prompt_tokens (upgate bills them at their own prices either way)."""
    u = chat_usage if isinstance(chat_usage, dict) else {}
    details = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
    prompt, completion = _n(u.get("prompt_tokens")), _n(u.get("completion_tokens"))
    cached, write = _n(details.get("cached_tokens")), _n(details.get("cache_write_tokens"))
    return {"input_tokens": max(0, prompt - cached - write), "output_tokens": completion,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": write}


def _n(value) -> int:
    return value if type(value) is int and value >= 0 else 0


def thinking_blocks(message: dict) -> list[dict]:
    """Reasoning as thinking blocks: reasoning_details keep their signatures (a client must send
    them back with a tool result); a bare `reasoning` string becomes one unsigned block."""
    out = []
    for d in message.get("reasoning_details") or ():
        if not isinstance(d, dict):
            continue
        if d.get("type") == "reasoning.encrypted":
            out.append({"type": "redacted_thinking", "data": d.get("data") or ""})
        elif d.get("type") == "reasoning.text":
            out.append({"type": "thinking", "thinking": d.get("text") or "",
                        "signature": d.get("signature") or ""})
    if not out and isinstance(message.get("reasoning"), str) and message["reasoning"]:
        out.append({"type": "thinking", "thinking": message["reasoning"], "signature": ""})
    return out


def tool_input(arguments) -> dict:
    """A tool call's JSON arguments as the tool_use `input` object ({} when not an object)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def from_chat(obj: dict, model_id: str, message_id: str) -> dict:
    """The Message for a `chat.completion` (its first choice: the Messages API has one)."""
    choices = obj.get("choices") if isinstance(obj.get("choices"), list) else []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content = thinking_blocks(message)
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            content.append({"type": "tool_use", "id": call.get("id") or "toolu_" + message_id,
                            "name": fn.get("name") or "", "input": tool_input(fn.get("arguments"))})
    out = {"id": message_id, "type": "message", "role": "assistant", "model": model_id,
           "content": content,
           "stop_reason": stop_reason(choice.get("finish_reason"), choice.get("native_finish_reason")),
           "stop_sequence": stop_sequence(choice), "usage": usage(obj.get("usage"))}
    if "svc" in obj:
        out["svc"] = obj["svc"]
    return out
