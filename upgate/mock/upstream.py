"""A fake OpenAI-compatible provider for tests, the demo and the benchmark.

Run it with `upgate mock-upstream --port N`, or in-process with `await serve(port)`.
`POST /v1/messages` speaks the Messages API: a provider of the `anthropic` dialect
(upgate/mock/anthropic.py); `POST /v1/responses` the Responses API (upgate/mock/responses.py).

Token accounting is deterministic so tests can compute exact costs:
- completion_tokens = the number of content chunks: `mock.chunks` (default 5), capped by
  max_tokens / max_completion_tokens, times `n`. Chunk i carries the text "tok<i> ".
- prompt_tokens = max(1, characters // 4), counting every string content of the messages
  (text parts of multi-part contents), the legacy `prompt`, or the embeddings `input`
  (an integer token counts as 4 characters).

Behaviour switches come from an optional body field `"mock": {...}` (the gateway forwards
unknown fields unchanged), over process-wide defaults set with `POST /_mock/config`:
  chunks N, chunk_delay_ms, latency_ms (before the headers), status + error (an
  OpenAI-style error body whose message names this server's URL, a fake key and an org id
  so scrubbing can be tested; `error` may be a message string or an object merged into
  the error), cut_after N (N chunks then an abrupt close, no [DONE]), silence_after N
  (N chunks then silence until the client leaves, at most 600 s), gate_after N (N chunks,
  then wait for `POST /_mock/release`), error_after_headers (200 + headers, then the given
  string if any, then an abrupt close), garbage (200 with a non-JSON body; a string sets
  it), no_usage, echo (the received body comes back under `mock_echo`), tool_calls (answer
  with a call of the first tool, its arguments spread over the chunks), cached_tokens N and
  cache_write_tokens N (reported in usage.prompt_tokens_details), tool_loop (one call of a tool
  a real agent runs, then a text answer once its result comes back: upgate/mock/tool_loop.py),
  cost (USD, reported as
  usage.cost like OpenRouter), refuse_keys [KEY, …] (401 invalid_api_key for a request whose
  bearer key is one of them, as a provider does for a revoked key).
For a non-stream response, cut_after / silence_after act after the headers (N = 0) or
after half the body (N > 0).

`GET /_mock/stats` → {connections, requests, disconnects, active, last_body, last_headers};
`POST /_mock/reset` zeroes them and the defaults.
"""

import asyncio
import base64
import hashlib
import logging
import signal
import struct
from typing import Any

import orjson
from tornado import netutil, web

from upgate.http.connection import HTTP1Server
from upgate.mock import anthropic, responses, tool_loop
from upgate.mock.behaviour import MAX_WAIT_S, MODELS, MockState, MockHandler, AnswerHandler, prompt_tokens


class MockHTTPServer(HTTP1Server):
    """Counts accepted TCP connections (tests assert keep-alive reuse with it)."""

    mock_state: MockState
    port: int

    def accept(self):
        self.mock_state.connections += 1
        return super().accept()


class ChatHandler(AnswerHandler):
    async def answer(self) -> None:
        body = self.body
        n = body.get("n") if isinstance(body.get("n"), int) else 1
        steps = self.n_chunks()
        prompt = prompt_tokens(body.get("messages", []))
        tools = body.get("tools")
        tool_name = None
        texts = [f"tok{k} " for k in range(steps)]  # the content, chunk by chunk
        args = [_tool_arg_piece(k, steps) for k in range(steps)]  # a tool call's, chunk by chunk
        if self.opts.get("tool_calls") and isinstance(tools, list) and tools:
            tool_name = (tools[0].get("function") or {}).get("name", "tool")
        elif self.opts.get("tool_loop"):
            tool_name, texts, args = _loop(body, texts)
            steps = len(args) if tool_name else len(texts)
        finish = "tool_calls" if tool_name else ("length" if self.length_cut() else "stop")
        usage = None if self.opts.get("no_usage") else self.usage(prompt, steps * n)
        head = self.head("chatcmpl", "chat.completion.chunk" if self.stream else "chat.completion")
        head["system_fingerprint"] = "fp_mock"
        if not self.stream:
            choices = []
            for i in range(n):
                message: dict = {"role": "assistant", "content": None, "refusal": None}
                if tool_name:
                    message["tool_calls"] = [{"id": f"call_mock{self.state.serial}_{i}", "type": "function",
                                              "function": {"name": tool_name, "arguments": "".join(args)}}]
                else:
                    message["content"] = "".join(texts)
                choices.append({"index": i, "message": message, "logprobs": None,
                                "finish_reason": finish})
            doc = {**head, "choices": choices}
            if usage:
                doc["usage"] = usage
            return await self.send_json(doc)
        content = []
        for k in range(steps):
            for i in range(n):
                delta: dict = {"role": "assistant"} if k == 0 else {}
                if tool_name:
                    call: dict = {"index": 0, "function": {"arguments": args[k]}}
                    if k == 0:
                        call.update(id=f"call_mock{self.state.serial}_{i}", type="function")
                        call["function"]["name"] = tool_name
                    delta["tool_calls"] = [call]
                else:
                    delta["content"] = texts[k]
                content.append({**head, "choices": [{"index": i, "delta": delta, "logprobs": None,
                                                     "finish_reason": None}]})
        tail = [{**head, "choices": [{"index": i, "delta": {}, "logprobs": None,
                                      "finish_reason": finish}]} for i in range(n)]
        if usage and self.wants_stream_usage():
            tail.append({**head, "choices": [], "usage": usage})
        await self.send_stream(content, tail)


def _loop(body: dict, texts: list[str]) -> tuple[str | None, list[str], list[str]]:
    """The tool loop on the chat route: (tool name, [], argument pieces) for a call, or
    (None, text pieces, []) once the conversation ends with the tool's result (`texts`, the
    usual answer, without tools)."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    names = [(t.get("function") or {}).get("name") for t in body.get("tools") or () if isinstance(t, dict)]
    planned = tool_loop.call([x for x in names if isinstance(x, str)])
    if last.get("role") == "tool":
        return None, tool_loop.answer(tool_loop.text_of(last.get("content"))), []
    if planned is None:
        return None, texts, []
    return planned[0], [], [orjson.dumps(planned[1]).decode()]


def _tool_arg_piece(k: int, steps: int) -> str:
    return ('{"t": "' if k == 0 else "") + f"tok{k} " + ('"}' if k == steps - 1 else "")


def _tool_args(steps: int) -> str:
    return "".join(_tool_arg_piece(k, steps) for k in range(steps))


class CompletionsHandler(AnswerHandler):
    """The legacy text completion endpoint."""

    async def answer(self) -> None:
        steps = self.n_chunks()
        prompt = prompt_tokens(self.body.get("prompt", ""))
        finish = "length" if self.length_cut() else "stop"
        usage = None if self.opts.get("no_usage") else self.usage(prompt, steps)
        head = self.head("cmpl", "text_completion")
        if not self.stream:
            doc = {**head, "choices": [{"index": 0, "text": "".join(f"tok{k} " for k in range(steps)),
                                        "logprobs": None, "finish_reason": finish}]}
            if usage:
                doc["usage"] = usage
            return await self.send_json(doc)
        content = [{**head, "choices": [{"index": 0, "text": f"tok{k} ", "logprobs": None,
                                         "finish_reason": None}]} for k in range(steps)]
        tail = [{**head, "choices": [{"index": 0, "text": "", "logprobs": None,
                                      "finish_reason": finish}]}]
        if usage and self.wants_stream_usage():
            tail.append({**head, "choices": [], "usage": usage})
        await self.send_stream(content, tail)


class EmbeddingsHandler(AnswerHandler):
    async def answer(self) -> None:
        raw = self.body.get("input", "")
        inputs = raw if isinstance(raw, list) and raw and not isinstance(raw[0], int) else [raw]
        dims = self.body.get("dimensions")
        dims = dims if isinstance(dims, int) and 0 < dims <= 4096 else 8
        as_base64 = self.body.get("encoding_format") == "base64"
        data = []
        for i, item in enumerate(inputs):
            vector = _vector(item, dims)
            embedding: Any = (base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
                              if as_base64 else vector)
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        tokens = prompt_tokens(raw)
        doc = {"object": "list", "data": data, "model": self.body.get("model", "mock/unknown")}
        if not self.opts.get("no_usage"):
            doc["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
        await self.send_json(doc)


def _vector(item: Any, dims: int) -> list[float]:
    """A deterministic unit-free vector in [-1, 1] from the input's bytes."""
    seed = orjson.dumps(item)
    out: list[float] = []
    counter = 0
    while len(out) < dims:
        digest = hashlib.sha256(seed + counter.to_bytes(4, "big")).digest()
        out.extend(round(b / 127.5 - 1, 6) for b in digest)
        counter += 1
    return out[:dims]


class ModelsHandler(MockHandler):
    def get(self) -> None:
        self.write_json({"object": "list", "data": [
            {"id": m, "object": "model", "created": 1700000000, "owned_by": "mock"} for m in MODELS]})


class ConfigHandler(MockHandler):
    """POST a JSON object of switches: merged into the defaults; `{}` clears them."""

    def post(self) -> None:
        try:
            conf = orjson.loads(self.request.body or b"{}")
        except orjson.JSONDecodeError:
            conf = None
        if not isinstance(conf, dict):
            return self.write_json({"error": {"message": "body must be a JSON object"}}, 400)
        if conf:
            self.state.defaults.update(conf)
        else:
            self.state.defaults = {}
        self.write_json({"defaults": self.state.defaults})


class StatsHandler(MockHandler):
    def get(self) -> None:
        self.write_json(self.state.stats())


class ResetHandler(MockHandler):
    def post(self) -> None:
        self.state.reset()
        self.write_json({"ok": True})


class ReleaseHandler(MockHandler):
    """Let every response waiting at gate_after continue."""

    def post(self) -> None:
        self.state.release.set()
        self.state.release = asyncio.Event()  # later gates wait for the next release
        self.write_json({"ok": True})


def make_app(state: MockState | None = None) -> web.Application:
    state = state or MockState()
    args = {"state": state}
    return web.Application([
        (r"/v1/chat/completions", ChatHandler, args),
        (r"/v1/completions", CompletionsHandler, args),
        (r"/v1/embeddings", EmbeddingsHandler, args),
        (r"/v1/messages", anthropic.MessagesHandler, args),  # the anthropic dialect (mock/anthropic.py)
        (r"/v1/responses", responses.ResponsesHandler, args),  # a provider with `responses = true`
        (r"/v1/models", ModelsHandler, args),
        (r"/_mock/config", ConfigHandler, args),
        (r"/_mock/stats", StatsHandler, args),
        (r"/_mock/reset", ResetHandler, args),
        (r"/_mock/release", ReleaseHandler, args),
    ], mock_state=state)


async def serve(port: int, host: str = "127.0.0.1") -> MockHTTPServer:
    """Start listening (port 0 picks a free one) and return the server; `server.port` is the
    bound port, `server.mock_state` the counters. The caller keeps the loop running."""
    app = make_app()
    server = MockHTTPServer(app, idle_timeout_s=MAX_WAIT_S)
    server.mock_state = app.settings["mock_state"]
    sockets = netutil.bind_sockets(port, host)
    await server.listen(sockets)
    server.port = sockets[0].getsockname()[1]
    return server


def main(port: int, host: str = "127.0.0.1") -> None:
    """Run the mock until SIGINT / SIGTERM (`upgate mock-upstream --port N`)."""
    logging.basicConfig(level=logging.WARNING)

    async def run() -> None:
        server = await serve(port, host)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"mock upstream listening on http://{host}:{server.port}/v1", flush=True)
        await stop.wait()
        server.stop()

    from upgate.http.connection import use_uvloop

    use_uvloop()  # the benchmark's thousands of paced streams
    asyncio.run(run())

