"""Chat-completion chunks → the Messages API's SSE events, in the order an Anthropic SDK
expects: message_start, ping, then per content block content_block_start / _delta / _stop,
then message_delta (stop_reason and usage), message_stop. Mid-stream failure: an `error` event.

One encoder per stream, fed every chunk the proxy's relay would have written (content as it
arrives; the usage chunk once the stream is settled), so billing sees exactly what it sees
for a chat client.
"""
from __future__ import annotations

import orjson

from upgate.messages import answer

_SIGNED = "reasoning.text"
_START_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def event(kind: str, data: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class EventEncoder:
    def __init__(self, model_id: str, message_id: str, input_tokens: int = 0) -> None:
        self.model_id, self.message_id, self.input_tokens = model_id, message_id, input_tokens
        self.started = False
        self.index = -1  # the open content block's index; -1 when none is open
        self.kind = None  # the open block's type
        self.tools: dict[int, int] = {}  # a chat tool call's index → its block index
        self.stop_reason = None
        self.stop_sequence = None
        self.delta_sent = False
        self.stopped = False
        self.first_usage: dict | None = None  # the provider's own message_start usage

    def start_usage(self, usage: dict | None) -> None:
        """message_start carries these counts (an anthropic provider's real ones) rather than
        the gateway's estimate."""
        if isinstance(usage, dict) and type(usage.get("input_tokens")) is int:
            self.first_usage = {k: v for k, v in usage.items() if k in _START_FIELDS and type(v) is int}

    def chunk(self, obj: dict) -> bytes:
        """The events for one chat chunk (b"" when it carries nothing a client sees)."""
        choices = obj.get("choices") if isinstance(obj.get("choices"), list) else []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        text = delta.get("content")
        if (self.kind == "text" and type(text) is str and text and len(delta) <= 2
                and not choice.get("finish_reason") and "usage" not in obj
                and (len(delta) == 1 or "role" in delta)):
            # the common event, text inside an open text block: one event, nothing else to look at
            return b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,' \
                b'"delta":{"type":"text_delta","text":%b}}\n\n' % (self.index, orjson.dumps(text))
        out = [self._start()]
        for d in delta.get("reasoning_details") or ():
            if isinstance(d, dict) and d.get("type") == _SIGNED:
                if d.get("text"):
                    out.append(self._delta("thinking", {"type": "thinking_delta", "thinking": d["text"]}))
                if d.get("signature"):
                    out.append(self._delta("thinking", {"type": "signature_delta", "signature": d["signature"]}))
            elif isinstance(d, dict) and d.get("type") == "reasoning.encrypted":
                out.append(self._block({"type": "redacted_thinking", "data": d.get("data") or ""}))
        if not delta.get("reasoning_details") and isinstance(delta.get("reasoning"), str) and delta["reasoning"]:
            out.append(self._delta("thinking", {"type": "thinking_delta", "thinking": delta["reasoning"]}))
        if isinstance(delta.get("content"), str) and delta["content"]:
            out.append(self._delta("text", {"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                out.append(self._tool(call))
        if choice.get("finish_reason"):
            self.stop_reason = answer.stop_reason(choice["finish_reason"], choice.get("native_finish_reason"))
            self.stop_sequence = answer.stop_sequence(choice)
            out.append(self._close())
        if isinstance(obj.get("usage"), dict):
            out.append(self._message_delta(obj["usage"], obj.get("svc")))
        return b"".join(out)

    def end(self) -> bytes:
        """The stream's end: whatever is still open, then message_stop."""
        if self.stopped:
            return b""
        out = [self._start(), self._close()]
        if not self.delta_sent:
            out.append(self._message_delta(None, None))
        self.stopped = True
        out.append(event("message_stop", {"type": "message_stop"}))
        return b"".join(out)

    def error(self, body: dict) -> bytes:
        """A mid-stream failure: the SDKs raise on an `error` event."""
        self.stopped = True
        return event("error", body)

    # ---- the pieces
    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        message = {"id": self.message_id, "type": "message", "role": "assistant",
                   "model": self.model_id, "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": self.first_usage or {"input_tokens": self.input_tokens, "output_tokens": 0}}
        return event("message_start", {"type": "message_start", "message": message}) + \
            event("ping", {"type": "ping"})

    def _open(self, block: dict, kind: str) -> bytes:
        closed = self._close()
        self.index += 1
        self.kind = kind
        return closed + event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                      "content_block": block})

    def _close(self) -> bytes:
        if self.kind is None:
            return b""
        self.kind = None
        return event("content_block_stop", {"type": "content_block_stop", "index": self.index})

    def _block(self, block: dict) -> bytes:
        """A whole block at once (redacted thinking has no deltas)."""
        return self._open(block, block["type"]) + self._close()

    def _delta(self, kind: str, delta: dict) -> bytes:
        opened = b""
        if self.kind != kind:
            block = {"type": "text", "text": ""} if kind == "text" else \
                {"type": "thinking", "thinking": "", "signature": ""}
            opened = self._open(block, kind)
        return opened + event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                      "delta": delta})

    def _tool(self, call: dict) -> bytes:
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        key = call.get("index") if type(call.get("index")) is int else len(self.tools)
        opened = b""
        if key not in self.tools:
            opened = self._open({"type": "tool_use", "id": call.get("id") or f"toolu_{self.message_id}_{key}",
                                 "name": fn.get("name") or "", "input": {}}, "tool_use")
            self.tools[key] = self.index
        args = fn.get("arguments")
        if not isinstance(args, str) or not args:
            return opened
        return opened + event("content_block_delta", {"type": "content_block_delta", "index": self.tools[key],
                                                      "delta": {"type": "input_json_delta", "partial_json": args}})

    def _message_delta(self, usage: dict | None, svc: dict | None) -> bytes:
        if self.delta_sent:
            return b""
        self.delta_sent = True
        data = {"type": "message_delta", "delta": {"stop_reason": self.stop_reason or "end_turn",
                                                   "stop_sequence": self.stop_sequence},
                "usage": answer.usage(usage) if usage is not None else
                {"input_tokens": self.input_tokens, "output_tokens": 0}}
        if svc:
            data["svc"] = svc
        return self._close() + event("message_delta", data)
