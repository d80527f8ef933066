"""The mock provider's Responses API (`POST /v1/responses`): a provider with `responses = true`
in the providers file. Deterministic like the chat mock: output_tokens = the text deltas
(`mock.chunks`, default 5, capped by max_output_tokens), each "tok<i> "; input_tokens =
characters // 4 of the instructions and the input's texts. `tool_calls` answers with a call of
the first tool ({"t": …} for a function, the text for a custom tool); `tool_loop` as the other
routes (upgate/mock/tool_loop.py). `cut_after N`, `status` and the other fault switches as on
the chat route. Errors in OpenAI's shape.
"""
from __future__ import annotations

import orjson
from tornado.iostream import StreamClosedError

from upgate.mock import tool_loop
from upgate.mock.behaviour import AnswerHandler, prompt_tokens


def event(data: dict) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class ResponsesHandler(AnswerHandler):
    def n_chunks(self) -> int:
        chunks = int(self.opts.get("chunks", 5))
        limit = self.body.get("max_output_tokens")
        return limit if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < chunks else chunks

    async def answer(self) -> None:
        body = self.body
        steps = self.n_chunks()
        items = body.get("input") if isinstance(body.get("input"), list) else [{"content": body.get("input") or ""}]
        prompt = prompt_tokens([items, body.get("instructions") or ""])
        tools = [t for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") in ("function", "custom")]
        texts, call = [f"tok{k} " for k in range(steps)], None
        if self.opts.get("tool_calls") and tools:
            t = tools[0]
            call = (t, orjson.dumps({"t": "".join(texts)}).decode() if t["type"] == "function" else "".join(texts))
        elif self.opts.get("tool_loop"):
            last = items[-1] if items and isinstance(items[-1], dict) else {}
            if last.get("type") in ("function_call_output", "custom_tool_call_output"):
                texts = tool_loop.answer(tool_loop.text_of(last.get("output")))
            elif (planned := tool_loop.call([t.get("name") for t in tools if isinstance(t.get("name"), str)])):
                t = next(t for t in tools if t.get("name") == planned[0])
                args = planned[1]
                call = (t, orjson.dumps(args).decode() if t["type"] == "function" else args.get("input", ""))
        serial = self.state.serial
        if call:
            t, payload = call
            steps = 1
            item = {"id": f"fc_mock{serial}", "type": "function_call" if t["type"] == "function" else "custom_tool_call",
                    "status": "completed", "call_id": f"call_mock{serial}", "name": t.get("name")}
            item["arguments" if t["type"] == "function" else "input"] = payload
        else:
            steps = len(texts)
            item = {"id": f"msg_mock{serial}", "type": "message", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": "".join(texts), "annotations": []}]}
        usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": int(self.opts.get("cached_tokens", 0))},
                 "output_tokens": steps, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": prompt + steps}
        response = {"id": f"resp_mock{serial}", "object": "response", "status": "completed",
                    "model": body.get("model"), "output": [item], "usage": usage}
        if self.length_cut() and not call:
            response.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
        if not self.stream:
            return await self.send_json(response)
        head = [event({"type": "response.created", "response": {**response, "status": "in_progress", "output": []}})]
        if call:
            added = {**item, "status": "in_progress", "arguments" if item["type"] == "function_call" else "input": ""}
            kind = "function_call_arguments" if item["type"] == "function_call" else "custom_tool_call_input"
            head.append(event({"type": "response.output_item.added", "output_index": 0, "item": added}))
            pieces = [event({"type": f"response.{kind}.delta", "item_id": item["id"], "output_index": 0,
                             "delta": payload})]
        else:
            head.append(event({"type": "response.output_item.added", "output_index": 0,
                               "item": {**item, "status": "in_progress", "content": []}}))
            pieces = [event({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                             "content_index": 0, "delta": t}) for t in texts]
        tail = [event({"type": "response.output_item.done", "output_index": 0, "item": item}),
                event({"type": "response.completed" if response["status"] == "completed" else "response.incomplete",
                       "response": response})]
        await self._send(head, pieces, tail)

    async def _send(self, head: list[bytes], pieces: list[bytes], tail: list[bytes]) -> None:
        self.set_header("Content-Type", "text/event-stream")
        try:
            self.write(b"".join(head))
            for sent, piece in enumerate(pieces):
                if await self._check(sent):
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
