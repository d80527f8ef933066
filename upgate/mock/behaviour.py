"""The mock provider's state and the machinery every answering route shares
(upgate/mock/upstream.py): deterministic prompt token counts, JSON and streamed sending with
pacing, and the behaviour switches its module docstring lists (cuts, silences, gates, errors
that name a fake key).
"""

import asyncio
import time
from collections import deque
from typing import Any

import orjson
from tornado import web
from tornado.iostream import StreamClosedError


FAKE_KEY = "sk-mock-SECRET123"
FAKE_ORG = "org-mockorg"
MAX_WAIT_S = 600.0  # no mock wait is ever longer than this
_SWITCHES = ("cut_after", "silence_after", "gate_after")  # faults during an answer
MODELS = ("mock/chat-1", "mock/chat-2", "mock/embed-1", "mock/instruct-1")

_ERROR_CODES = {400: "invalid_request_error", 401: "invalid_api_key", 403: "forbidden",
                404: "model_not_found", 413: "request_too_large", 422: "unprocessable_entity",
                429: "rate_limit_exceeded"}


class MockState:
    """Counters and switches shared by every handler and the server."""

    def __init__(self) -> None:
        self.defaults: dict = {}
        self.release = asyncio.Event()
        self.reset()

    def reset(self) -> None:
        self.defaults = {}
        self.connections = 0  # TCP connections accepted
        self.requests = 0  # requests to /v1/*
        self.disconnects = 0  # responses the client walked away from
        self.active = 0  # /v1/* requests in progress
        self.last_body: Any = None
        self.last_headers: dict | None = None
        self.serial = 0

    def stats(self) -> dict:
        return {"connections": self.connections, "requests": self.requests,
                "disconnects": self.disconnects, "active": self.active,
                "last_body": self.last_body, "last_headers": self.last_headers}


def prompt_tokens(value: Any) -> int:
    """max(1, characters // 4) over every string in a prompt, message list or input."""
    return max(1, _chars(value) // 4)


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return 4  # a pre-tokenised prompt: one token each
    if isinstance(value, list):
        return sum(_chars(v) for v in value)
    if isinstance(value, dict):
        if "content" in value:  # a chat message
            return _chars(value["content"])
        text = value.get("text")  # a content part
        return len(text) if isinstance(text, str) else 0
    return 0


class MockHandler(web.RequestHandler):
    def initialize(self, state: MockState) -> None:
        self.state = state

    def write_json(self, doc: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(orjson.dumps(doc))


class AnswerHandler(MockHandler):
    """The shared flow of the three model endpoints: parse, faults, then answer."""

    _nap: asyncio.Future | None = None  # the pause under way

    def prepare(self) -> None:
        self.state.requests += 1
        self.state.active += 1
        self.state.serial += 1
        self.gone = asyncio.Event()
        self.closing_myself = False
        self.state.last_headers = dict(self.request.headers)
        try:
            self.body = orjson.loads(self.request.body or b"{}")
        except orjson.JSONDecodeError:
            self.body = None
        self.state.last_body = self.body
        if not isinstance(self.body, dict):
            self.body = {}
            self.opts = {}
            self._error(400, {"message": "We could not parse the JSON body of your request."})
            return
        mock = self.body.get("mock")
        self.opts = {**self.state.defaults, **(mock if isinstance(mock, dict) else {})}
        self.stream = self.body.get("stream") is True

    def on_finish(self) -> None:
        self.state.active -= 1

    def on_connection_close(self) -> None:
        if not self.closing_myself:
            self.state.disconnects += 1
        self.gone.set()
        if self._nap is not None:
            _wake(self._nap)

    async def post(self) -> None:
        opts = self.opts
        latency = opts.get("latency_ms")
        if latency and await self._pause(latency / 1000):
            return
        refused = opts.get("refuse_keys")  # like a provider that revoked these keys: 401
        if isinstance(refused, list) and self.request.headers.get("Authorization", "")[7:] in refused:
            return self._error(401, "Incorrect API key provided.")
        status = opts.get("status")
        if status and status != 200:
            return self._error(int(status), opts.get("error"))
        if opts.get("error_after_headers"):
            return await self._error_after_headers(opts["error_after_headers"])
        if opts.get("garbage"):
            garbage = opts["garbage"]
            body = garbage if isinstance(garbage, str) else "<html><body>502 Bad Gateway</body></html>"
            self.set_header("Content-Type",
                            "text/event-stream" if self.stream else "application/json")
            return self.finish(body.encode())
        await self.answer()

    async def answer(self) -> None:
        raise NotImplementedError

    # -- shapes --------------------------------------------------------------------------

    def n_chunks(self) -> int:
        chunks = int(self.opts.get("chunks", 5))
        for field in ("max_tokens", "max_completion_tokens"):
            limit = self.body.get(field)
            if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < chunks:
                chunks = limit
        return chunks

    def length_cut(self) -> bool:
        """True when max_tokens, not the mock's plan, ended the answer."""
        return self.n_chunks() < int(self.opts.get("chunks", 5))

    def wants_stream_usage(self) -> bool:
        options = self.body.get("stream_options")
        usage = self.body.get("usage")
        return (isinstance(options, dict) and options.get("include_usage") is True) or (
            isinstance(usage, dict) and usage.get("include") is True)

    def usage(self, prompt: int, completion: int) -> dict:
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}
        details = {f: int(self.opts[f]) for f in ("cached_tokens", "cache_write_tokens") if f in self.opts}
        if details:  # part of prompt_tokens, as OpenAI and OpenRouter report them
            usage["prompt_tokens_details"] = details
        if "cost" in self.opts:  # OpenRouter's usage.cost: USD, a JSON number
            usage["cost"] = float(self.opts["cost"])
        return usage

    def head(self, prefix: str, obj: str) -> dict:
        return {"id": f"{prefix}-mock{self.state.serial}", "object": obj,
                "created": int(time.time()), "model": self.body.get("model", "mock/unknown")}

    def echo(self, doc: dict) -> dict:
        if self.opts.get("echo"):
            doc["mock_echo"] = self.body
        return doc

    # -- replies -------------------------------------------------------------------------

    def _error(self, status: int, error: Any) -> None:
        host = self.request.host
        body = {"message": (f"Mock upstream at http://{host}{self.request.path} failed for key "
                            f"{FAKE_KEY} (organization {FAKE_ORG})"),
                "type": "mock_error", "param": None, "code": _ERROR_CODES.get(status, "mock_error")}
        if isinstance(error, str):
            body["message"] = error
        elif isinstance(error, dict):
            body.update(error)
        self.write_json({"error": body}, status)

    async def send_json(self, doc: dict) -> None:
        """A non-stream answer, honouring cut_after / silence_after / gate_after."""
        data = orjson.dumps(self.echo(doc))
        opts = self.opts
        for switch in _SWITCHES:
            if opts.get(switch) is not None:
                self.set_header("Content-Type", "application/json")
                if int(opts[switch]) > 0:
                    self.write(data[: len(data) // 2])
                    data = data[len(data) // 2:]
                if await self._interrupt(switch):
                    return
        self.set_header("Content-Type", "application/json")
        self.finish(data)

    async def send_stream(self, content: list[dict], tail: list[dict]) -> None:
        """SSE: the content chunks (one flush each), then the tail, then [DONE]."""
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        opts = self.opts
        delay = (opts.get("chunk_delay_ms") or 0) / 1000
        if delay and len(content) > 1 and all(opts.get(s) is None for s in _SWITCHES):
            return await self._paced(content, tail, delay)
        sent = 0
        try:
            for chunk in content:
                if await self._check(sent) or (sent and delay and await self._pause(delay)):
                    return
                if sent == 0:
                    self.echo(chunk)
                self.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
                await self.flush()
                sent += 1
            if await self._check(sent):
                return
            for chunk in tail:
                self.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            self.write(b"data: [DONE]\n\n")
            await self.flush()
        except StreamClosedError:
            return
        self.finish()

    async def _paced(self, content: list[dict], tail: list[dict], delay: float) -> None:
        """send_stream's plain paced case, written from a timer per chunk: no coroutine step,
        flush future or JSON encoding per chunk. It is what the benchmark's thousands of
        streams ask for, on a core the mock shares with the load generator: the coroutine
        path cost ~31 µs of the mock's CPU per chunk, this one ~20."""
        self.echo(content[0])
        frames = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in content]
        frames[-1] += b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in tail)
        frames[-1] += b"data: [DONE]\n\n"
        try:
            self.write(frames[0])
            await self.flush()  # the headers go out with the first chunk
        except StreamClosedError:
            return
        out, loop = self.request.connection, asyncio.get_running_loop()
        self._nap = over = loop.create_future()
        rest = deque(frames[1:])

        def tick() -> None:
            if over.done() or self.gone.is_set():
                return  # the client left
            sent = out.write(rest.popleft())
            if sent.done():
                after(sent)
            else:  # the reader is behind: go on from when it catches up
                sent.add_done_callback(after)

        def after(_sent) -> None:
            if rest:
                loop.call_later(delay, tick)
            else:
                _wake(over)  # the last frame carried the tail and [DONE]

        loop.call_later(delay, tick)
        try:
            await over  # (a tick still due finds it done and stops)
        finally:
            self._nap = None
        if not self.gone.is_set():
            self.finish()

    async def _check(self, sent: int) -> bool:
        """Act on the switch due after `sent` chunks; True when the response is over."""
        for switch in _SWITCHES:
            value = self.opts.get(switch)
            if value is not None and int(value) == sent:
                return await self._interrupt(switch)
        return False

    async def _interrupt(self, switch: str) -> bool:
        try:
            await self.flush()  # headers (and what was written) go out first
        except StreamClosedError:
            return True
        if switch == "cut_after":
            self._close()
            return True
        if switch == "silence_after":
            await self._pause(MAX_WAIT_S)
            self._close()
            return True
        release = asyncio.ensure_future(self.state.release.wait())
        gone = asyncio.ensure_future(self.gone.wait())
        await asyncio.wait((release, gone), timeout=MAX_WAIT_S,
                           return_when=asyncio.FIRST_COMPLETED)
        release.cancel()
        gone.cancel()
        return self.gone.is_set()

    async def _error_after_headers(self, garbage: Any) -> None:
        self.set_header("Content-Type", "text/event-stream" if self.stream else "application/json")
        if isinstance(garbage, str):
            self.write(garbage.encode())
        await self.flush()
        self._close()

    async def _pause(self, seconds: float) -> bool:
        """Sleep up to `seconds` (bounded); True if the client went away meanwhile. A future
        and a timer rather than wait_for, whose Task per call was most of a paced stream's
        cost: this runs once per chunk, thousands of times a second in the benchmark."""
        if self.gone.is_set():
            return True
        loop = asyncio.get_running_loop()
        self._nap = nap = loop.create_future()
        timer = loop.call_later(min(seconds, MAX_WAIT_S), _wake, nap)
        try:
            await nap
        finally:
            timer.cancel()
            self._nap = None
        return self.gone.is_set()

    def _close(self) -> None:
        """Drop the connection without ending the response (no final chunk, no [DONE])."""
        self.closing_myself = True
        self.request.connection.conn.transport.close()  # what was written goes out first;
        # tornado's automatic finish() then writes nothing


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
