"""The mock provider's Messages API (`POST /v1/messages`): a provider of the `anthropic`
dialect, following Anthropic's documented contract: `x-api-key` and `anthropic-version`
headers, `max_tokens` required, a Message (or `event:`-named SSE events: message_start, ping,
content_block_start/_delta/_stop, message_delta with usage, message_stop), errors as
`{"type": "error", "error": {"type", "message"}}`.

Deterministic like the chat mock: output_tokens = the content deltas (`mock.chunks`, default
5, capped by max_tokens), each "tok<i> "; input tokens = characters // 4 of the system and
message texts. `cached_tokens` / `cache_write_tokens` switches are reported as
cache_read_input_tokens / cache_creation_input_tokens, outside input_tokens as Anthropic counts
them. `tool_calls` answers with a tool_use of the first tool; a request with `thinking`
enabled gets a thinking block (signed "sig-mock") first. The fault switches (status, cut_after,
silence_after, gate_after, latency_ms) work as on the chat route.
"""
from __future__ import annotations

import orjson
from tornado.iostream import StreamClosedError

from upgate.mock import tool_loop
from upgate.mock.behaviour import AnswerHandler, prompt_tokens

VERSION = "2023-06-01"
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
          500: "api_error", 529: "overloaded_error"}


def event(kind: str, data: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class MessagesHandler(AnswerHandler):
    def _error(self, status: int, error) -> None:
        message = error if isinstance(error, str) else \
            f"Mock upstream at http://{self.request.host}{self.request.path} failed"
        self.write_json({"type": "error", "error": {"type": _TYPES.get(status, "api_error"),
                                                    "message": message}}, status)

    async def answer(self) -> None:
        body = self.body
        if "Authorization" in self.request.headers:  # Anthropic takes its key in x-api-key only
            return self._error(401, "invalid x-api-key")
        if self.request.headers.get("anthropic-version") != VERSION:
            return self._error(400, "anthropic-version header is required")
        if not isinstance(body.get("max_tokens"), int):
            return self._error(400, "max_tokens: Field required")
        steps = self.n_chunks()
        system = body.get("system")
        prompt = prompt_tokens([body.get("messages", []), system or []])
        cached, write = (int(self.opts.get(f, 0)) for f in ("cached_tokens", "cache_write_tokens"))
        usage = {"input_tokens": max(0, prompt - cached - write), "output_tokens": steps,
                 "cache_read_input_tokens": cached, "cache_creation_input_tokens": write}
        tools = body.get("tools")
        tool = tools[0].get("name", "tool") if self.opts.get("tool_calls") and isinstance(tools, list) \
            and tools and isinstance(tools[0], dict) else None
        texts = [f"tok{k} " for k in range(steps)]
        args = [_arg_piece(k, steps) for k in range(steps)]
        if tool is None and self.opts.get("tool_loop"):
            tool, texts, args = _loop(body, texts)
            steps = len(args) if tool else len(texts)
            usage["output_tokens"] = steps
        thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled"
        stop = "tool_use" if tool else "max_tokens" if self.length_cut() else "end_turn"
        seq = next((s for s in body.get("stop_sequences") or () if isinstance(s, str) and s.startswith("tok")
                    and s[3:].isdigit() and int(s[3:]) < steps), None)
        if seq is not None and not tool:  # "tokN" ends the answer before it, as Anthropic's does
            steps, stop = int(seq[3:]), "stop_sequence"
            usage["output_tokens"] = steps
            texts = texts[:steps]
        mid = f"msg_mock{self.state.serial}"
        if not self.stream:
            content = [{"type": "thinking", "thinking": "mock thinking", "signature": "sig-mock"}] if thinking else []
            if tool:
                content.append({"type": "tool_use", "id": f"toolu_mock{self.state.serial}", "name": tool,
                                "input": orjson.loads("".join(args))})
            else:
                content.append({"type": "text", "text": "".join(texts)})
            return await self.send_json({"id": mid, "type": "message", "role": "assistant",
                                         "model": body.get("model"), "content": content,
                                         "stop_reason": stop, "stop_sequence": seq, "usage": usage})
        start = {**usage, "output_tokens": 1}
        head = [event("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": body.get("model"), "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start}}), event("ping", {"type": "ping"})]
        index = 0
        if thinking:
            head += [_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
                     _delta(0, {"type": "thinking_delta", "thinking": "mock thinking"}),
                     _delta(0, {"type": "signature_delta", "signature": "sig-mock"}), _stop(0)]
            index = 1
        if tool:
            head.append(_start(index, {"type": "tool_use", "id": f"toolu_mock{self.state.serial}",
                                       "name": tool, "input": {}}))
            pieces = [_delta(index, {"type": "input_json_delta", "partial_json": a}) for a in args]
        else:
            head.append(_start(index, {"type": "text", "text": ""}))
            pieces = [_delta(index, {"type": "text_delta", "text": t}) for t in texts]
        tail = [_stop(index), event("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": stop, "stop_sequence": seq}, "usage": {"output_tokens": steps}}),
            event("message_stop", {"type": "message_stop"})]
        await self._send_events(head, pieces, tail)

    async def _send_events(self, head: list[bytes], pieces: list[bytes], tail: list[bytes]) -> None:
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        delay = (self.opts.get("chunk_delay_ms") or 0) / 1000
        try:
            self.write(b"".join(head))
            for sent, piece in enumerate(pieces):
                if await self._check(sent) or (sent and delay and await self._pause(delay)):
                    return
                self.write(piece)
                await self.flush()
            if await self._check(len(pieces)):
                return
            self.write(b"".join(tail))
            await self.flush()
        except StreamClosedError:
            return
        self.finish()


def _loop(body: dict, texts: list[str]) -> tuple[str | None, list[str], list[str]]:
    """The tool loop in the Messages API (upgate/mock/tool_loop.py): a tool_use of a tool the
    agent runs, or the text answer once the last user turn carries its tool_result."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    content = last.get("content") if isinstance(last.get("content"), list) else []
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        return None, tool_loop.answer(tool_loop.text_of(results[-1].get("content"))), []
    names = [t.get("name") for t in body.get("tools") or () if isinstance(t, dict)
             and t.get("type") in (None, "custom") and not t.get("defer_loading")]
    planned = tool_loop.call([x for x in names if isinstance(x, str)])
    if planned is None:
        return None, texts, []
    return planned[0], [], [orjson.dumps(planned[1]).decode()]


def _arg_piece(k: int, steps: int) -> str:
    return ('{"t": "' if k == 0 else "") + f"tok{k} " + ('"}' if k == steps - 1 else "")


def _start(index: int, block: dict) -> bytes:
    return event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _delta(index: int, delta: dict) -> bytes:
    return event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _stop(index: int) -> bytes:
    return event("content_block_stop", {"type": "content_block_stop", "index": index})
