"""A Messages request → the chat-completions body the proxy runs (validation included).

The chat body is what is validated, sized into a hold and settled, whatever the upstream: one
billing path. For a provider of the `anthropic` dialect the client's own Messages body goes
upstream instead (`native`), so nothing is lost on the way there.

Translated: system (string or text blocks), `role: "system"` messages inside the conversation
(Claude Code's mid-conversation-system beta: a system message in its place), text / image
(base64 or URL) / document (base64 PDF) / tool_use / tool_result / thinking / redacted_thinking
blocks, tools and tool_choice, stop_sequences, temperature, top_p, top_k, max_tokens, stream,
thinking enabled (its budget as `reasoning.max_tokens`), output_config.effort (as
`reasoning_effort`), metadata.user_id. Dropped for chat upstreams, having no meaning there
(docs/client-guide.md lists them): server tools (a tool with a `type` other than "custom", e.g.
web_search_*) and tools marked `defer_loading` (not in the model's context until a tool search
loads them), cache_control marks, citations, adaptive thinking without an effort,
thinking.display, context_management, container, mcp_servers, service_tier. An anthropic
upstream gets all of it as sent.

Refusals are worded as Anthropic words them (`messages.1.role: Input should be 'user' or
'assistant'`), so an agent's own fallback for an unsupported shape recognises them.
"""
from __future__ import annotations

import orjson

from upgate.errors import GatewayError

ROLES = ("user", "assistant", "system")
_STOP_MAX = 16
# output_config.effort → chat's reasoning_effort (the values every chat API accepts)
# blocks of Anthropic's server tools and beta features: no chat meaning, left out of a chat
# upstream's request (an anthropic upstream gets them)
_NO_CHAT_MEANING = frozenset((
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "mcp_tool_use",
    "mcp_tool_result", "container_upload", "tool_reference", "tool_search_tool_result"))
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "max": "high", "xhigh": "high"}


class MessagesAsChat(dict):
    """The chat body of a Messages request; `native` is the client's Messages body, which an
    `anthropic` dialect provider receives as it is (upstream/dialects.py)."""

    native: dict | None = None


def _bad(message: str) -> GatewayError:
    return GatewayError("invalid_request", message)


def to_chat(body: dict) -> MessagesAsChat:
    """The chat-completions body for a Messages request; 400 invalid_request for what the
    Messages API refuses (max_tokens missing, an unknown role, a malformed block)."""
    model = body.get("model")
    if model is None:
        raise _bad("`model` is required.")
    if "max_tokens" not in body or body["max_tokens"] is None:
        raise _bad("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: at least one message is required")
    out = MessagesAsChat(model=model, max_tokens=body["max_tokens"])
    out.native = body
    chat: list[dict] = []
    system = _system_text(body.get("system"))
    if system is not None:
        chat.append({"role": "system", "content": system})
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ROLES:
            raise _bad(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if role == "system":
            chat.append({"role": "system", "content": _system_text(m.get("content"), f"messages.{i}.content")})
        else:
            chat.extend(_user(m.get("content"), i) if role == "user" else [_assistant(m.get("content"), i)])
    out["messages"] = chat
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > _STOP_MAX:
            raise _bad(f"`stop_sequences` must be a list of at most {_STOP_MAX} strings.")
        if stops:
            out["stop"] = stops
    stream = body.get("stream", False)
    out["stream"] = stream
    if stream is True:  # the client's stream ends with usage (message_delta): ask for it
        out["stream_options"] = {"include_usage": True}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise _bad("`tools` must be a list of objects.")
        functions = [_tool(t, i) for i, t in enumerate(tools)
                     if t.get("type") in (None, "custom") and t.get("defer_loading") is not True]
        if functions:
            out["tools"] = functions
    choice = body.get("tool_choice")
    if choice is not None and out.get("tools"):
        _tool_choice(choice, out)
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if type(budget) is not int or budget < 1:
            raise _bad("`thinking.budget_tokens` must be a positive integer.")
        out["reasoning"] = {"max_tokens": budget}
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, dict) else None
    if isinstance(effort, str) and effort in _EFFORT and "reasoning" not in out and not (
            isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        out["reasoning_effort"] = _EFFORT[effort]  # (a budget says more: OpenRouter takes one of the two)
    meta = body.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("user_id"), str):
        out["user"] = meta["user_id"]
    return out


def _system_text(system, where: str = "system") -> str | None:
    if system is None and where == "system":
        return None
    if isinstance(system, str):
        return system
    if isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                        and isinstance(b.get("text"), str) for b in system):
        return "\n\n".join(b["text"] for b in system)
    raise _bad(f"{where}: Input should be a valid string or a list of text blocks")


def _blocks(content, i: int) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise _bad(f"messages.{i}.content must be a string or a list of content blocks.")
    return content


def _user(content, i: int) -> list[dict]:
    """One user turn: its tool results first (each a `tool` message, as chat wants them right
    after the assistant's calls), then the rest as one user message."""
    tools, parts = [], []
    for block in _blocks(content, i):
        kind = block.get("type")
        if kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise _bad(f"messages.{i}: a tool_result needs its tool_use_id.")
            text = _result_text(block.get("content"), i)
            if block.get("is_error") is True:
                text = "Error: " + text
            tools.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        elif kind == "text":
            parts.append({"type": "text", "text": _text(block, i)})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _source_url(block, i)}})
        elif kind == "document":
            parts.append({"type": "file", "file": {"filename": block.get("title") or "document.pdf",
                                                   "file_data": _source_url(block, i)}})
        elif kind == "search_result":
            parts.append({"type": "text", "text": _result_text(block.get("content"), i)})
        elif kind not in _NO_CHAT_MEANING:
            raise _unknown_block(kind, i)
    out = list(tools)
    if parts:
        plain = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "".join(p["text"] for p in parts) if plain and len(parts) == 1
                    else parts})
    return out


def _assistant(content, i: int) -> dict:
    text, calls, reasoning = [], [], []
    for block in _blocks(content, i):
        kind = block.get("type")
        if kind == "text":
            text.append(_text(block, i))
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise _bad(f"messages.{i}: a tool_use needs its id and name.")
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"], "arguments": orjson.dumps(block.get("input") or {}).decode()}})
        elif kind == "thinking":
            reasoning.append({"type": "reasoning.text", "text": str(block.get("thinking") or ""),
                              "signature": block.get("signature")})
        elif kind == "redacted_thinking":
            reasoning.append({"type": "reasoning.encrypted", "data": block.get("data")})
        elif kind not in _NO_CHAT_MEANING:
            raise _unknown_block(kind, i)
    out: dict = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        out["tool_calls"] = calls
    if reasoning:
        out["reasoning_details"] = reasoning
    return out


def _unknown_block(kind, i: int) -> GatewayError:
    return _bad(f"messages.{i}.content: Input tag {str(kind)[:64]!r} found using 'type' does not match "
                f"any of the expected tags")


def _text(block: dict, i: int) -> str:
    if not isinstance(block.get("text"), str):
        raise _bad(f"messages.{i}: a text block needs its text.")
    return block["text"]


def _source_url(block: dict, i: int) -> str:
    src = block.get("source")
    if isinstance(src, dict) and src.get("type") == "base64" and isinstance(src.get("data"), str):
        return f"data:{src.get('media_type') or 'application/octet-stream'};base64,{src['data']}"
    if isinstance(src, dict) and src.get("type") == "url" and isinstance(src.get("url"), str):
        return src["url"]
    raise _bad(f"messages.{i}: an {block.get('type')} block needs a base64 or url source.")


def _result_text(content, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if not all(isinstance(t, str) for t in texts):  # a number's "".join was a 500
            raise _bad(f"messages.{i}: a tool_result's text block needs its text.")
        return "".join(texts)
    raise _bad(f"messages.{i}: a tool_result's content must be a string or a list of blocks.")


def _tool(tool: dict, i: int) -> dict:
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise _bad(f"tools[{i}]: `name` is required.")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise _bad(f"tools[{i}]: `input_schema` must be an object.")
    fn = {"name": tool["name"], "parameters": schema}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def _tool_choice(choice, out: dict) -> None:
    if not isinstance(choice, dict):
        raise _bad("`tool_choice` must be an object.")
    kind = choice.get("type")
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise _bad("`tool_choice.type` must be auto, any, tool (with a name) or none.")
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
