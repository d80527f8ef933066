"""Chat-completion chunks → the Responses API's stream events, in the order Codex and the
openai SDKs read them:

    response.created, response.in_progress,
    per output item: response.output_item.added, then
      a message:   response.content_part.added, response.output_text.delta…,
                   response.output_text.done, response.content_part.done
      a call:      response.function_call_arguments.delta…, response.function_call_arguments.done
                   (a custom tool's: response.custom_tool_call_input.delta… / .done)
      reasoning:   response.reasoning_summary_part.added, response.reasoning_summary_text.delta…,
                   response.reasoning_summary_text.done, response.reasoning_summary_part.done
    response.output_item.done, and last response.completed (or response.incomplete) with usage.
A failure part-way ends the stream with response.failed, its `response.error` the spec's code.

One encoder per stream, fed every chunk the proxy's relay would have written, so billing sees
exactly what it sees for a chat client (the usage chunk comes once the stream is settled).
"""
from __future__ import annotations

import orjson

from upgate.responses.answer import Shape, custom_input, status_of, usage


class EventEncoder:
    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.seq = 0
        self.started = False
        self.output: list[dict] = []  # finished items, in order
        self.open: dict | None = None  # the item being streamed: {"kind", "item", "index", "text"}
        self.calls: dict[int, dict] = {}  # a chat tool call's index → its open item state
        self.status, self.incomplete = "completed", None
        self.ended = False

    def _event(self, kind: str, data: dict) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def chunk(self, obj: dict) -> bytes:
        out = [self._start()]
        choices = obj.get("choices") if isinstance(obj.get("choices"), list) else []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        if isinstance(delta.get("reasoning"), str) and delta["reasoning"]:
            out.append(self._text("reasoning", delta["reasoning"]))
        if isinstance(delta.get("content"), str) and delta["content"]:
            out.append(self._text("message", delta["content"]))
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                out.append(self._call(call))
        if choice.get("finish_reason"):
            self.status, self.incomplete = status_of(choice["finish_reason"])
            out.append(self._close())
        if isinstance(obj.get("usage"), dict):
            out.append(self._finish(obj["usage"], obj.get("svc")))
        return b"".join(out)

    def end(self) -> bytes:
        """The stream's end without a usage chunk (the client still gets its last event)."""
        return self._start() + self._close() + self._finish(None, None)

    def error(self, err: dict) -> bytes:
        """A failure part-way: response.failed, with what was produced so far."""
        if self.ended:
            return b""
        out = self._start() + self._close()
        self.ended = True
        body = self.shape.response("failed", self.output, error={"code": err.get("code"), "message": err.get("message")})
        return out + self._event("response.failed", {"response": body})

    # ---- the pieces
    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        body = self.shape.response("in_progress", [])
        return self._event("response.created", {"response": body}) + \
            self._event("response.in_progress", {"response": body})

    def _added(self, item: dict) -> bytes:
        return self._event("response.output_item.added", {"output_index": len(self.output), "item": item})

    def _text(self, kind: str, text: str) -> bytes:
        """Text of a message or of a reasoning summary, opening its item when another is open."""
        out = b""
        if self.open is None or self.open["kind"] != kind:
            out += self._close()
            shape = self.shape
            if kind == "message":
                item = {**shape.message(shape.item_id("msg"), "", "in_progress"), "content": []}
                out += self._added(item) + self._event("response.content_part.added", {
                    "item_id": item["id"], "output_index": len(self.output), "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})
            else:
                item = shape.reasoning(shape.item_id("rs"), "")
                out += self._added(item) + self._event("response.reasoning_summary_part.added", {
                    "item_id": item["id"], "output_index": len(self.output), "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""}})
            self.open = {"kind": kind, "item": item, "text": []}
        state = self.open
        state["text"].append(text)
        where = {"item_id": state["item"]["id"], "output_index": len(self.output)}
        if kind == "message":
            return out + self._event("response.output_text.delta", {**where, "content_index": 0, "delta": text,
                                                                     "logprobs": []})
        return out + self._event("response.reasoning_summary_text.delta", {**where, "summary_index": 0, "delta": text})

    def _call(self, call: dict) -> bytes:
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        key = call.get("index") if type(call.get("index")) is int else len(self.calls)
        out = b""
        state = self.calls.get(key)
        if state is None or state is not self.open:
            out += self._close()
            name = fn.get("name") or ""
            shape = self.shape
            item = shape.call(shape.item_id("fc"), call.get("id") or shape.item_id("call"), name, "", "in_progress")
            state = self.calls[key] = self.open = {"kind": "call", "item": item, "text": []}
            out += self._added(item)
        args = fn.get("arguments")
        if not isinstance(args, str) or not args:
            return out
        state["text"].append(args)
        if state["item"]["type"] == "custom_tool_call":
            return out  # its input is known once the arguments are whole (sent at the item's end)
        return out + self._event("response.function_call_arguments.delta", {
            "item_id": state["item"]["id"], "output_index": len(self.output), "delta": args})

    def _close(self) -> bytes:
        """Finish the open item: its done events, output_item.done; it joins the output."""
        state, self.open = self.open, None
        if state is None:
            return b""
        item, text = state["item"], "".join(state["text"])
        where = {"item_id": item["id"], "output_index": len(self.output)}
        shape = self.shape
        if state["kind"] == "message":
            done = shape.message(item["id"], text)
            part = done["content"][0]
            out = self._event("response.output_text.done", {**where, "content_index": 0, "text": text, "logprobs": []}) + \
                self._event("response.content_part.done", {**where, "content_index": 0, "part": part})
        elif state["kind"] == "reasoning":
            done = shape.reasoning(item["id"], text)
            out = self._event("response.reasoning_summary_text.done", {**where, "summary_index": 0, "text": text}) + \
                self._event("response.reasoning_summary_part.done", {
                    **where, "summary_index": 0, "part": {"type": "summary_text", "text": text}})
        elif item["type"] == "custom_tool_call":
            raw = custom_input(text)
            done = {**item, "status": "completed", "input": raw}
            out = self._event("response.custom_tool_call_input.delta", {**where, "delta": raw}) + \
                self._event("response.custom_tool_call_input.done", {**where, "input": raw})
        else:
            done = {**item, "status": "completed", "arguments": text}
            out = self._event("response.function_call_arguments.done", {**where, "name": item["name"],
                                                                       "arguments": text})
        out += self._event("response.output_item.done", {"output_index": len(self.output), "item": done})
        self.output.append(done)
        return out

    def _finish(self, chat_usage: dict | None, svc: dict | None) -> bytes:
        if self.ended:
            return b""
        self.ended = True
        out = self._close()
        body = self.shape.response(self.status, self.output, usage(chat_usage) if chat_usage is not None else None,
                                   incomplete=self.incomplete)
        if svc:
            body["svc"] = svc
        kind = "response.completed" if self.status == "completed" else "response.incomplete"
        return out + self._event(kind, {"response": body})
