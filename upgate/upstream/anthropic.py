"""The `anthropic` provider dialect: a provider that speaks the Messages API natively.

Upstream of the proxy everything is chat completions (what is validated, sized and billed), so
this module translates at the provider's edge, both ways:
- the request: a Messages client's own body goes as it is (its `native` body: thinking
  signatures, cache_control and server tools intact); a chat client's body is translated;
- the answer: a Message becomes a `chat.completion`, and its SSE events become chat chunks
  (StreamParser), with usage in the chat shape the settlement reads: input tokens read from
  and written to the prompt cache are inside prompt_tokens and named in
  prompt_tokens_details (cached_tokens, cache_write_tokens), priced at the catalog's cache
  prices. Thinking travels as reasoning_details with its signature (OpenRouter's shape).
"""
from __future__ import annotations

import time

import orjson

from upgate.messages.answer import tool_input
from upgate.upstream.sse import JSONEventsToChunks

VERSION = "2023-06-01"  # the anthropic-version header sent upstream
DEFAULT_MAX_TOKENS = 4096  # the Messages API requires max_tokens; the spec's default hold
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
           "refusal": "content_filter", "pause_turn": "stop"}


def request_body(body: dict, upstream_model: str, stream: bool) -> dict:
    native = getattr(body, "native", None)
    out = dict(native) if isinstance(native, dict) else from_chat(body)
    out["model"] = upstream_model
    out["stream"] = stream
    return out


# ---- chat request → Messages request
def from_chat(body: dict) -> dict:
    system, messages = [], []
    for m in body.get("messages") or ():
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(m.get("content")))
        elif role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id") or "",
                     "content": _text_of(m.get("content"))}
            _append(messages, "user", [block])
        elif role == "assistant":
            blocks = []
            for d in m.get("reasoning_details") or ():
                if isinstance(d, dict) and d.get("type") == "reasoning.text" and d.get("signature"):
                    blocks.append({"type": "thinking", "thinking": d.get("text") or "", "signature": d["signature"]})
            text = _text_of(m.get("content"))
            if text:
                blocks.append({"type": "text", "text": text})
            for call in m.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    blocks.append({"type": "tool_use", "id": call.get("id") or "", "name": fn.get("name") or "",
                                   "input": tool_input(fn.get("arguments"))})
            _append(messages, "assistant", blocks or [{"type": "text", "text": ""}])
        else:
            _append(messages, "user", _user_blocks(m.get("content")))
    limits = [body[f] for f in ("max_tokens", "max_completion_tokens") if type(body.get(f)) is int]
    out: dict = {"messages": messages, "max_tokens": max(limits) if limits else DEFAULT_MAX_TOKENS}
    if system:
        out["system"] = "\n\n".join(system)
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list):
        out["stop_sequences"] = [s for s in stop if isinstance(s, str)]
    tools = [t.get("function") for t in body.get("tools") or () if isinstance(t, dict)]
    tools = [{"name": f.get("name"), "description": f.get("description") or "",
              "input_schema": f.get("parameters") or {"type": "object", "properties": {}}}
             for f in tools if isinstance(f, dict)]
    if tools:
        out["tools"] = tools
        choice = body.get("tool_choice")
        if choice == "required":
            out["tool_choice"] = {"type": "any"}
        elif choice in ("auto", "none"):
            out["tool_choice"] = {"type": choice}
        elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            out["tool_choice"] = {"type": "tool", "name": choice["function"].get("name")}
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and type(reasoning.get("max_tokens")) is int:
        out["thinking"] = {"type": "enabled", "budget_tokens": reasoning["max_tokens"]}
    if isinstance(body.get("user"), str):
        out["metadata"] = {"user_id": body["user"]}
    return out


def _append(messages: list, role: str, blocks: list) -> None:
    """Messages alternate roles: consecutive turns of one role are merged."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": list(blocks)})


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _user_blocks(content) -> list[dict]:
    if not isinstance(content, list):
        return [{"type": "text", "text": _text_of(content)}]
    blocks = []
    for p in content:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str):
            blocks.append({"type": "text", "text": p["text"]})
        elif isinstance(p.get("image_url"), dict) and isinstance(p["image_url"].get("url"), str):
            blocks.append({"type": "image", "source": _source(p["image_url"]["url"])})
    return blocks or [{"type": "text", "text": ""}]


def _source(url: str) -> dict:
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return {"type": "base64", "media_type": head, "data": data}
    return {"type": "url", "url": url}


# ---- Messages answer → chat answer
def chat_usage(u: dict | None) -> dict | None:
    """Anthropic usage (input tokens apart from those read from / written to the cache) as a chat
    usage object (prompt_tokens includes them, named in prompt_tokens_details)."""
    if not isinstance(u, dict):
        return None
    n = {k: (u.get(k) if type(u.get(k)) is int and u.get(k) >= 0 else 0) for k in
         ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")}
    prompt = n["input_tokens"] + n["cache_read_input_tokens"] + n["cache_creation_input_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": n["output_tokens"],
            "total_tokens": prompt + n["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": n["cache_read_input_tokens"],
                                      "cache_write_tokens": n["cache_creation_input_tokens"]}}


def chat_answer(raw: bytes) -> dict:
    """A Message (or an error body) as a `chat.completion`; an error body stays an error body."""
    msg = orjson.loads(raw)
    if not isinstance(msg, dict) or isinstance(msg.get("error"), dict):
        return msg
    text, calls, details = [], [], []
    for block in msg.get("content") or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text.append(block.get("text") or "")
        elif kind == "tool_use":
            calls.append({"id": block.get("id"), "type": "function", "function": {
                "name": block.get("name"), "arguments": orjson.dumps(block.get("input") or {}).decode()}})
        elif kind == "thinking":
            details.append({"type": "reasoning.text", "text": block.get("thinking") or "",
                            "signature": block.get("signature") or ""})
        elif kind == "redacted_thinking":
            details.append({"type": "reasoning.encrypted", "data": block.get("data") or ""})
    message: dict = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if details:
        message["reasoning_details"] = details
        message["reasoning"] = "".join(d.get("text", "") for d in details)
    out = {"id": msg.get("id") or "", "object": "chat.completion", "created": int(time.time()),
           "model": msg.get("model") or "",
           "choices": [{"index": 0, "message": message, **_finish(msg)}]}
    usage = chat_usage(msg.get("usage"))
    if usage is not None:
        out["usage"] = usage
    return out


def _finish(d: dict) -> dict:
    """A choice's finish fields for a Message's (or message_delta's) stop: the chat reason, the
    provider's own (native_finish_reason, as OpenRouter names it) and the stop sequence met."""
    out = {"finish_reason": _FINISH.get(d.get("stop_reason"), "stop"),
           "native_finish_reason": d.get("stop_reason")}
    if isinstance(d.get("stop_sequence"), str):
        out["stop_sequence"] = d["stop_sequence"]
    return out


class StreamParser(JSONEventsToChunks):
    """Feed a Messages SSE stream's bytes; get chat-chunk payloads (JSON bytes), `[DONE]` at
    message_stop. The usage chunk (no choices) follows the chunk that finishes the choice, as
    an OpenAI stream's does; an `error` event becomes an error payload (a mid-stream failure)."""

    def __init__(self) -> None:
        super().__init__()
        self._id, self._model = "", ""
        self._usage: dict = {}
        self._tools = 0
        self.start_usage: dict | None = None  # message_start's usage: the provider's real input count

    def _chunk(self, delta: dict | None, finish: dict | None = None, usage: dict | None = None) -> bytes:
        obj = {"id": self._id, "object": "chat.completion.chunk", "created": int(time.time()),
               "model": self._model,
               "choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                     **(finish or {"finish_reason": None})}]}
        if usage is not None:
            obj["usage"] = usage
        return orjson.dumps(obj)

    def _event(self, ev: dict) -> list[bytes]:
        kind = ev.get("type")
        if kind == "message_start":
            msg = ev.get("message") if isinstance(ev.get("message"), dict) else {}
            self._id, self._model = msg.get("id") or "", msg.get("model") or ""
            self._usage = dict(msg.get("usage") or {}) if isinstance(msg.get("usage"), dict) else {}
            self.start_usage = self._usage
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            block = ev.get("content_block") if isinstance(ev.get("content_block"), dict) else {}
            if block.get("type") == "tool_use":
                index, self._tools = self._tools, self._tools + 1
                return [self._chunk({"tool_calls": [{"index": index, "id": block.get("id"), "type": "function",
                                                     "function": {"name": block.get("name"), "arguments": ""}}]})]
            if block.get("type") == "redacted_thinking":
                return [self._chunk({"reasoning_details": [{"type": "reasoning.encrypted",
                                                            "data": block.get("data") or ""}]})]
            if block.get("type") == "text" and block.get("text"):
                return [self._chunk({"content": block["text"]})]
            return []
        if kind == "content_block_delta":
            d = ev.get("delta") if isinstance(ev.get("delta"), dict) else {}
            t = d.get("type")
            if t == "text_delta":
                return [self._chunk({"content": d.get("text") or ""})]
            if t == "input_json_delta":
                return [self._chunk({"tool_calls": [{"index": self._tools - 1,
                                                     "function": {"arguments": d.get("partial_json") or ""}}]})]
            if t == "thinking_delta":
                return [self._chunk({"reasoning": d.get("thinking") or "", "reasoning_details": [
                    {"type": "reasoning.text", "text": d.get("thinking") or ""}]})]
            if t == "signature_delta":
                return [self._chunk({"reasoning_details": [{"type": "reasoning.text", "text": "",
                                                            "signature": d.get("signature") or ""}]})]
            return []
        if kind == "message_delta":
            d = ev.get("delta") if isinstance(ev.get("delta"), dict) else {}
            self._usage.update({k: v for k, v in (ev.get("usage") or {}).items() if v is not None})
            return [self._chunk({}, _finish(d)),
                    self._chunk(None, usage=chat_usage(self._usage))]
        if kind == "message_stop":
            return [b"[DONE]"]
        if kind == "error":
            err = ev.get("error") if isinstance(ev.get("error"), dict) else {}
            return [orjson.dumps({"error": err})]
        return []  # ping, and event types added later
