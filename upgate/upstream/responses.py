"""A provider that speaks the Responses API (providers file: `responses = true`): a client's
Responses request goes to its /v1/responses as the client sent it (the model renamed, `store`
false: the gateway keeps nothing and asks nothing kept), and its answer and events are read
back here as chat completions, which the proxy settles by and the client's encoder
(upgate/responses/) renders again. Usage: input_tokens (cached inside, as in chat) and
output_tokens (reasoning inside), as the settlement reads them.
"""
from __future__ import annotations

import time

import orjson

from upgate.upstream.sse import JSONEventsToChunks

PATH = "responses"


_BILLED_TOOLS = ("function", "custom", "namespace")  # what the hold and the charge account for


def request_body(body: dict, upstream_model: str, stream: bool) -> dict:
    original = getattr(body, "original", None)
    out = dict(original) if isinstance(original, dict) else dict(body)
    out["model"] = upstream_model
    out["stream"] = stream
    out["store"] = False
    if isinstance(out.get("tools"), list):
        # built-in tools (web_search, image_generation, code_interpreter, …) are billed by the
        # provider per call, which no hold or charge here counts: left out, as on a translated
        # route, and named in X-Svc-Dropped-Tools (upgate/handlers/responses.py)
        out["tools"] = [_served(t) for t in out["tools"]
                        if isinstance(t, dict) and t.get("type") in _BILLED_TOOLS]
        if not out["tools"]:
            del out["tools"]
        choice = out.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") not in ("function", "custom", "allowed_tools"):
            out["tool_choice"] = "auto"
    return out


def _served(tool: dict) -> dict:
    if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
        return {**tool, "tools": [t for t in tool["tools"] if isinstance(t, dict) and t.get("type") in _BILLED_TOOLS]}
    return tool


def chat_usage(u) -> dict | None:
    if not isinstance(u, dict):
        return None
    n = {k: (u.get(k) if type(u.get(k)) is int and u.get(k) >= 0 else 0) for k in ("input_tokens", "output_tokens")}
    details = u.get("input_tokens_details") if isinstance(u.get("input_tokens_details"), dict) else {}
    out_details = u.get("output_tokens_details") if isinstance(u.get("output_tokens_details"), dict) else {}
    cached = details.get("cached_tokens") if type(details.get("cached_tokens")) is int else 0
    reasoning = out_details.get("reasoning_tokens") if type(out_details.get("reasoning_tokens")) is int else 0
    return {"prompt_tokens": n["input_tokens"], "completion_tokens": n["output_tokens"],
            "total_tokens": n["input_tokens"] + n["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning}}


def _s(value) -> str:
    """A provider's field that should be text, as text ("" for anything else): a malformed answer
    is the provider's failure, never a TypeError in the gateway."""
    return value if isinstance(value, str) else ""


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _finish(response: dict, calls: bool) -> str:
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return "content_filter" if reason == "content_filter" else "length"
    return "tool_calls" if calls else "stop"


def _call(item: dict) -> dict | None:
    if item.get("type") == "function_call":
        args = item.get("arguments") if isinstance(item.get("arguments"), str) else ""
    elif item.get("type") == "custom_tool_call":
        args = orjson.dumps({"input": item.get("input") if isinstance(item.get("input"), str) else ""}).decode()
    else:
        return None
    return {"id": _s(item.get("call_id")), "type": "function", "function": {"name": _s(item.get("name")),
                                                                          "arguments": args}}


def chat_answer(raw: bytes):
    """A Response (or an error body) as a `chat.completion`."""
    resp = orjson.loads(raw)
    if not isinstance(resp, dict) or isinstance(resp.get("error"), dict):
        return resp
    text, calls, reasoning = [], [], []
    for item in _list(resp.get("output")):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            text += [_s(p.get("text")) for p in _list(item.get("content")) if isinstance(p, dict)
                     and p.get("type") == "output_text"]
        elif item.get("type") == "reasoning":
            reasoning += [_s(p.get("text")) for p in _list(item.get("summary")) if isinstance(p, dict)]
        elif (call := _call(item)) is not None:
            calls.append(call)
    message: dict = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning"] = "".join(reasoning)
    out = {"id": _s(resp.get("id")), "object": "chat.completion", "created": int(time.time()),
           "model": _s(resp.get("model")),
           "choices": [{"index": 0, "message": message, "finish_reason": _finish(resp, bool(calls))}]}
    usage = chat_usage(resp.get("usage"))
    if usage is not None:
        out["usage"] = usage
    return out


class StreamParser(JSONEventsToChunks):
    """Feed a Responses SSE stream's bytes; get chat-chunk payloads, `[DONE]` after the
    response's last event (completed, incomplete or failed)."""

    def __init__(self) -> None:
        super().__init__()
        self._id, self._model = "", ""
        self._calls: dict[str, int] = {}  # item id → chat tool call index
        self._custom: dict[str, list[str]] = {}  # a custom tool call's input, by item id

    def _chunk(self, delta: dict | None, finish: str | None = None, usage: dict | None = None) -> bytes:
        obj = {"id": self._id, "object": "chat.completion.chunk", "created": int(time.time()), "model": self._model,
               "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage is not None:
            obj["usage"] = usage
        return orjson.dumps(obj)

    def _event(self, ev: dict) -> list[bytes]:
        kind = ev.get("type")
        if kind == "response.created":
            resp = ev.get("response") if isinstance(ev.get("response"), dict) else {}
            self._id, self._model = _s(resp.get("id")), _s(resp.get("model"))
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "response.output_text.delta":
            return [self._chunk({"content": _s(ev.get("delta"))})]
        if kind == "response.reasoning_summary_text.delta":
            return [self._chunk({"reasoning": _s(ev.get("delta"))})]
        if kind == "response.output_item.added":
            item = ev.get("item") if isinstance(ev.get("item"), dict) else {}
            if item.get("type") in ("function_call", "custom_tool_call"):
                index = self._calls[_s(item.get("id"))] = len(self._calls)
                if item.get("type") == "custom_tool_call":
                    self._custom[_s(item.get("id"))] = []
                return [self._chunk({"tool_calls": [{"index": index, "id": _s(item.get("call_id")), "type": "function",
                                                     "function": {"name": _s(item.get("name")), "arguments": ""}}]})]
            return []
        if kind == "response.function_call_arguments.delta" and _s(ev.get("item_id")) in self._calls:
            return [self._chunk({"tool_calls": [{"index": self._calls[_s(ev.get("item_id"))],
                                                 "function": {"arguments": _s(ev.get("delta"))}}]})]
        if kind == "response.custom_tool_call_input.delta" and _s(ev.get("item_id")) in self._custom:
            self._custom[_s(ev.get("item_id"))].append(_s(ev.get("delta")))
            return []
        if kind == "response.output_item.done":
            item = ev.get("item") if isinstance(ev.get("item"), dict) else {}
            if _s(item.get("id")) in self._custom:  # a custom call's input, whole, as its one argument
                raw = item.get("input") if isinstance(item.get("input"), str) else "".join(self._custom[item["id"]])
                return [self._chunk({"tool_calls": [{"index": self._calls[item["id"]], "function": {
                    "arguments": orjson.dumps({"input": raw}).decode()}}]})]
            return []
        if kind in ("response.completed", "response.incomplete"):
            resp = ev.get("response") if isinstance(ev.get("response"), dict) else {}
            return [self._chunk({}, _finish(resp, bool(self._calls))),
                    self._chunk(None, usage=chat_usage(resp.get("usage")) or {}), b"[DONE]"]
        if kind in ("response.failed", "error"):
            resp = ev.get("response") if isinstance(ev.get("response"), dict) else {}
            err = resp.get("error") if isinstance(resp.get("error"), dict) else ev
            return [orjson.dumps({"error": {"message": err.get("message") or "The provider's response failed.",
                                            "code": err.get("code")}})]
        return []
