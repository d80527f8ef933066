"""A Responses API request → the chat-completions body the proxy validates, holds from, forwards
and settles (one billing path). Stateless, as OpenRouter's: the whole conversation is in `input`;
`previous_response_id`, `conversation` and `background` would need a stored response → 400.

Translated: `instructions` and system/developer messages (system messages), user and assistant
messages (input_text / output_text / refusal / input_image / input_file parts), function_call and
custom_tool_call items (assistant tool calls), their outputs (tool messages), function and custom
tools (a custom tool becomes a function of one string parameter, `input`, and its calls come back
as custom_tool_call items), tools inside namespaces and `additional_tools` items (Codex's), tool_choice,
parallel_tool_calls, max_output_tokens (max_tokens), reasoning.effort (reasoning_effort),
text.format (response_format), text.verbosity, temperature, top_p, top_logprobs, user, stream.
Left out, having no chat-completions meaning (docs/client-guide.md lists them): built-in tools
(web_search, file_search, image_generation, code_interpreter, computer_use, local_shell, mcp, …:
named in X-Svc-Dropped-Tools), reasoning items and reasoning.summary, items of built-in tools,
store, include, metadata, prompt_cache_key, truncation, service_tier, client_metadata.
"""
from __future__ import annotations

import re

import orjson

from upgate.errors import GatewayError

_STATEFUL = ("previous_response_id", "conversation")
_IGNORED_ITEMS = frozenset(("reasoning", "web_search_call", "file_search_call", "image_generation_call",
                            "code_interpreter_call", "computer_call", "computer_call_output", "local_shell_call",
                            "local_shell_call_output", "mcp_call", "mcp_list_tools", "mcp_approval_request",
                            "mcp_approval_response", "compaction", "tool_search_call", "tool_search_output"))
_CUSTOM_PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"],
                      "additionalProperties": False}
_MAX_TOOLS = 512
# A tool's `type` as the API spells them (web_search_preview, mcp, ...): only such a token is named
# back in X-Svc-Dropped-Tools (a header takes no CR/LF and no text beyond Latin-1)
_TOOL_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")


class ResponsesAsChat(dict):
    """The chat body of a Responses request. `original`: the client's own body (what an upstream
    that speaks the Responses API gets); `custom_tools`: names of the client's custom tools (a
    call of one is answered as a custom_tool_call); `dropped_tools`: built-in tools left out."""

    original: dict | None = None
    custom_tools: frozenset = frozenset()
    dropped_tools: tuple = ()


def _bad(message: str, param: str | None = None) -> GatewayError:
    return GatewayError("invalid_request", message)


def to_chat(body: dict) -> ResponsesAsChat:
    for field in _STATEFUL:
        if body.get(field) is not None:
            raise _bad(f"`{field}` is not supported: this gateway stores no responses (it is stateless). "
                       f"Send the whole conversation in `input`, and `store: false`.")
    if body.get("background") is True:
        raise _bad("`background` is not supported: this gateway stores no responses (it is stateless).")
    out = ResponsesAsChat(model=body.get("model"))
    out.original = body
    messages: list[dict] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    elif instructions is not None and not isinstance(instructions, str):
        raise _bad("`instructions` must be a string.")
    tools: list = list(body.get("tools") or ()) if isinstance(body.get("tools"), list) else []
    if body.get("tools") is not None and not isinstance(body.get("tools"), list):
        raise _bad("`tools` must be a list.")
    raw = body.get("input")
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            _item(item, i, messages, tools)
    else:
        raise _bad("`input` must be a string or a list of items.")
    out["messages"] = messages
    functions, custom, dropped = _tools(tools)
    if functions:
        out["tools"] = functions
        _tool_choice(body.get("tool_choice"), out)
        if isinstance(body.get("parallel_tool_calls"), bool):
            out["parallel_tool_calls"] = body["parallel_tool_calls"]
    out.custom_tools, out.dropped_tools = frozenset(custom), tuple(dropped)
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p", "top_logprobs", "user"):
        if body.get(name) is not None:
            out[name] = body[name]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("effort"), str):
        out["reasoning_effort"] = reasoning["effort"]
    _text(body.get("text"), out)
    stream = body.get("stream", False)
    out["stream"] = stream
    if stream is True:  # response.completed carries usage: ask for it
        out["stream_options"] = {"include_usage": True}
    return out


def _item(item, i: int, messages: list, tools: list) -> None:
    if not isinstance(item, dict):
        raise _bad(f"input[{i}] must be an object.")
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind is not None and not isinstance(kind, str):
        raise _bad(f"input[{i}].type must be a string.")
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise _bad(f"input[{i}].role must be one of user, assistant, system, developer.")
        content = _content(item.get("content"), i, role == "assistant")
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    elif kind in ("function_call", "custom_tool_call"):
        if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
            raise _bad(f"input[{i}]: a {kind} needs its call_id and name.")
        if kind == "function_call":
            args = item.get("arguments") if isinstance(item.get("arguments"), str) else "{}"
        else:
            args = orjson.dumps({"input": item.get("input") if isinstance(item.get("input"), str) else ""}).decode()
        call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": args}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind in ("function_call_output", "custom_tool_call_output"):
        if not isinstance(item.get("call_id"), str):
            raise _bad(f"input[{i}]: a {kind} needs its call_id.")
        messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": _output_text(item.get("output"))})
    elif kind == "additional_tools":  # Codex's tools for some models, sent as an input item
        if isinstance(item.get("tools"), list):
            tools.extend(item["tools"])
    elif kind == "item_reference":
        raise _bad(f"input[{i}]: item_reference needs a stored response; this gateway stores none "
                   f"(it is stateless). Send the item itself.")
    elif kind not in _IGNORED_ITEMS:
        raise _bad(f"input[{i}]: items of type {str(kind)[:64]!r} are not supported.")


def _content(content, i: int, assistant: bool):
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"input[{i}].content must be a string or a list of parts.")
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text", "refusal"):
            text = part.get("text") if kind != "refusal" else part.get("refusal")
            if not isinstance(text, str):
                raise _bad(f"input[{i}]: a {kind} part needs its text.")
            parts.append({"type": "text", "text": text})
        elif kind == "input_image" and not assistant:
            url = part.get("image_url")
            if not isinstance(url, str):
                raise _bad(f"input[{i}]: an input_image needs an image_url (file ids need stored files).")
            image = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file" and not assistant:
            if not isinstance(part.get("file_data"), str):
                raise _bad(f"input[{i}]: an input_file needs its file_data (file ids need stored files).")
            parts.append({"type": "file", "file": {"filename": part.get("filename") or "file.pdf",
                                                   "file_data": part["file_data"]}})
        else:
            raise _bad(f"input[{i}]: a content part of type {str(kind)[:64]!r} is not supported.")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)  # one string: every chat upstream reads it
    return parts


def _output_text(output) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(p.get("text", "") for p in output if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _tools(tools: list) -> tuple[list, list, list]:
    """(chat function tools, custom tool names, names of the built-in tools left out)."""
    functions, custom, dropped = [], [], []
    flat = []
    for t in tools:
        if isinstance(t, dict) and t.get("type") == "namespace" and isinstance(t.get("tools"), list):
            flat.extend(t["tools"])
        else:
            flat.append(t)
    if len(flat) > _MAX_TOOLS:
        raise _bad(f"`tools` may hold at most {_MAX_TOOLS} tools.")
    for i, t in enumerate(flat):
        if not isinstance(t, dict):
            raise _bad(f"tools[{i}] must be an object.")
        kind, name = t.get("type"), t.get("name")
        if not isinstance(kind, str) or not _TOOL_TYPE.match(kind):
            raise _bad(f"tools[{i}].type must be a tool type: function, custom or a built-in tool's name.")
        if kind in ("function", "custom"):
            if not isinstance(name, str) or not name:
                raise _bad(f"tools[{i}]: `name` is required.")
            fn: dict = {"name": name}
            if isinstance(t.get("description"), str):
                fn["description"] = t["description"]
            if kind == "function":
                fn["parameters"] = t.get("parameters") if isinstance(t.get("parameters"), dict) else \
                    {"type": "object", "properties": {}}
                if isinstance(t.get("strict"), bool):
                    fn["strict"] = t["strict"]
            else:
                fn["parameters"] = _CUSTOM_PARAMETERS
                custom.append(name)
            functions.append({"type": "function", "function": fn})
        else:
            dropped.append(kind)
    return functions, custom, dropped


def _tool_choice(choice, out: dict) -> None:
    if choice in (None, "auto"):
        return
    if choice in ("none", "required"):
        out["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") in ("function", "custom") \
            and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif isinstance(choice, dict):
        return  # allowed_tools, a built-in tool: the model chooses (auto)
    else:
        raise _bad("`tool_choice` must be auto, none, required or an object.")


def _text(text, out: dict) -> None:
    if not isinstance(text, dict):
        return
    fmt = text.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    if isinstance(text.get("verbosity"), str):
        out["verbosity"] = text["verbosity"]
