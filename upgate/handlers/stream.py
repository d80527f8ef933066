"""The stream relay of the proxy routes (a mixin of ProxyHandler): a provider's SSE events
reach the client as they arrive, content events straight from libcurl's write callback, and the
stream is settled by the last usage the provider reported, or, when it is cut, by what was
relayed (upgate/billing/output_count.py).
"""
from __future__ import annotations

import asyncio
import time
from collections import deque

import orjson
import tornado.iostream

from upgate.errors import GatewayError
from upgate.billing.output_count import as_list, as_ours, chars_output, estimate_tokens, usage_tokens
from upgate.upstream import sse
from upgate.upstream.client import UpstreamCut, UpstreamTimeout
from upgate.upstream.dialects import stream_parser
from upgate.upstream.errors import body_error_message

_BATCH = 64 * 1024  # bytes of a stream's backlog written before waiting for the client
# Backpressure: past this many bytes of backlog the provider's transfer is paused (call.hold)
# until the client has taken half of it, so a slow reader costs this process ~_HOLD_AT, not
# whatever the provider could write meanwhile.
_HOLD_AT = 64 * 1024
# A client that leaves once the provider has finished generating: how long the provider's usage
# event (what it bills us by) is waited for, rather than billing an estimate of what was relayed.
USAGE_GRACE_S = 10.0
# How most providers write a chunk that finishes nothing: a byte search skips _finishes for it.
_NOT_DONE = b'"finish_reason":null'

CLIENT_CLOSED = (499, "client_closed")  # a request record's outcome when the client left first


class CandidateFailed(Exception):
    """This candidate failed before anything reached the client: try the next one."""

    def __init__(self, err: GatewayError, strike: bool = False, refused_key: str | None = None):
        # strike: a rate limit (the spec's cool-down); refused_key: the pooled key's variable
        # the provider refused (401/403), so the same route may go on with another key
        self.err, self.strike, self.refused_key = err, strike, refused_key


class StreamRelay:
    """Uses ProxyHandler's state (hold, key, answered, _call, _gone, ...) and its _settle,
    _add_meta and _attempt_over."""

    _parser = None  # the answering provider's stream parser (a Messages client reads its first usage)

    def _open_sse(self) -> None:
        if self._sse_open:
            return
        self._sse_open = True
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        self.last_write = time.monotonic()

    def ping(self) -> None:
        """Keep a buffering proxy from closing a quiet stream (called by the node's sweeper)."""
        if self._finished or self._gone or not self.stream:
            return
        self._open_sse()
        self.write(sse.KEEPALIVE)
        self.flush()
        self.last_write = time.monotonic()

    async def _relay_stream(self, call, model, body) -> None:
        """Events are parsed in libcurl's write callback (relay_now). While this task waits,
        content events go straight to the client from there: no task wake per event, which
        was a fifth of a stream's cost. Everything else (a usage event; an error; [DONE]; a
        malformed event), everything after it, and everything that comes while this task is
        busy or the client is not reading, goes to the backlog, which this task relays in
        order. The stream is settled at its end, by the last usage the provider reported: some
        report it on every chunk, and the first is not the bill. The client's headers go out
        with the first event (or the first keep-alive): a provider that answers 200 and then
        fails before any event is a failed candidate, and the next `models` entry is tried."""
        parser = self._parser = stream_parser(self._dialect(model))
        # The gateway asked upstream for usage on the client's behalf; a client that did not ask
        # must not get a chunk with empty `choices` (common code indexes choices[0]).
        meta = self._meta
        relay_usage = _client_wants_usage(body) or meta
        out = self.request.connection
        backlog: deque[bytes] = deque()  # events for this task, in arrival order
        parked = False  # this task waits in call.wait(): relay_now may write itself
        ended = False  # the relay is over: whatever else the provider sends is dropped
        chars = 0  # of content the client was sent: what a cut stream is billed for
        last: dict = {}  # the last chunk relayed: a usage chunk of our own copies its id
        pending = 0  # bytes in the backlog, about (its events' payloads)
        name = self.names.get(model.id)  # the alias the client asked by, if it did

        def relay_now(data: bytes) -> bool:
            nonlocal chars, last, pending
            if ended:
                return False
            events = parser.feed(data)
            if not events:
                return False
            # (after a held usage chunk, everything keeps its order through the backlog)
            if not parked or backlog or held is not None or not self._sse_open or not out.writable():
                backlog.extend(events)
                pending += sum(map(len, events))
                if pending > _HOLD_AT:
                    call.hold()
                return True
            sent, n_chars = [], 0
            for n, payload in enumerate(events):
                obj = _content_event(payload)
                if obj is None:
                    backlog.extend(events[n:])
                    pending += sum(len(e) for e in events[n:])
                    break
                n_chars += chars_output(obj, "delta")
                if not self._generated and _finishes(payload, obj):
                    self._generated = True
                as_ours(obj, model, name)
                sent.append(self._sse(obj))
                last = obj
            if sent:
                out.write(b"".join(sent))
                chars += n_chars
                self.last_write = time.monotonic()
            return bool(backlog)

        usage = None  # the last usage the provider reported
        # Its usage chunk, relayed once the stream is settled: one with no choices, or (with
        # X-Svc-Include-Meta) any, since the svc block goes on the chunk with the final usage,
        # whatever else it carries (LiteLLM's has `choices: [{"index": 0, "delta": {}}]`).
        held = None
        done = False

        def send(obj: dict) -> int:
            nonlocal last
            as_ours(obj, model, name)
            event = self._sse(obj)
            if not self._sse_open:
                self._open_sse()  # the headers leave with the first event
            self.write(event)
            last = obj
            return len(event)

        call.relay_to(relay_now)
        try:
            while True:
                wrote = 0
                # in batches: a client that reads slowly then waits for one batch at a time
                # (the whole backlog in one write would keep it "not reading" for as long as it
                # takes to read it all, and the sweep would cut it), and other connections get
                # the loop between batches
                while backlog and not done and not self._gone and wrote < _BATCH:
                    payload = backlog.popleft()
                    pending -= len(payload)
                    if payload == b"[DONE]":
                        done = True
                        break
                    try:
                        obj = orjson.loads(payload)
                    except orjson.JSONDecodeError:
                        raise UpstreamCut("malformed event") from None
                    if not isinstance(obj, dict):
                        continue
                    if isinstance(obj.get("error"), dict):
                        raise UpstreamCut(body_error_message(
                            obj["error"], self.ctx.providers.get(model.provider), model))
                    chars += chars_output(obj, "delta")
                    if not self._generated and _finishes(payload, obj):
                        self._generated = True
                    if held is not None and held.get("choices"):
                        # a held chunk with choices is not the last event after all: it goes
                        # out now, in order (the svc block then rides on a usage chunk of ours)
                        wrote += send(held)
                        held = None
                    if isinstance(obj.get("usage"), dict):
                        usage = obj["usage"]
                        if meta or not obj.get("choices"):
                            held = obj  # (a held one without choices carried nothing else)
                            continue
                        if not relay_usage:
                            del obj["usage"]
                    wrote += send(obj)
                if wrote and not self._gone:
                    self.last_write = time.monotonic()
                    try:
                        await self.flush()
                    except tornado.iostream.StreamClosedError:
                        self._gone = True
                        break
                    if pending < _HOLD_AT // 2:
                        call.release()  # (may relay its kept chunk at once, into the backlog)
                    if backlog:
                        await asyncio.sleep(0)
                    continue  # more may have come meanwhile
                if done or self._gone:
                    break
                if call.over:
                    if call.error is not None:
                        raise call.error
                    break
                parked = True
                call.release()
                try:
                    await call.wait()
                finally:
                    parked = False
            if self._gone and usage is None and self._generated:
                usage = await _usage_after_leave(call, backlog)
        except (UpstreamCut, UpstreamTimeout) as e:
            if not self._sse_open and not self._gone and usage is None:
                raise CandidateFailed(GatewayError("upstream_timeout" if isinstance(e, UpstreamTimeout)
                                           else "upstream_error")) from None  # nothing sent yet
            self._attempt_over()
            if held is not None and held.get("choices") and not self._gone:
                send(held)  # its content was counted as relayed
            await self._cut(model, body, chars, e, usage)
            return
        except tornado.iostream.StreamClosedError:
            self._gone = True
        finally:
            ended = True
            backlog.clear()
        if not self._sse_open and not self._gone and not done and usage is None:
            raise CandidateFailed(GatewayError("upstream_error", "The provider's stream ended before any event."))
        self._attempt_over()
        self._open_sse()  # (an answer of no content events: the headers go with what follows)
        if self._gone or not done and usage is None:
            # the client left, or the provider ended without [DONE] or usage: bill its usage if
            # it came, else what was relayed
            await self._cut(model, body, chars, None, usage)
            return
        if usage is not None:
            await self._settle(model, body, *usage_tokens(usage, self._prompt(body), chars), usage)
            if held is None and meta:  # its usage chunk went out before content that followed
                held = self._usage_chunk(model, last, usage)
            if held is not None and relay_usage:
                self._add_meta(held, model)
                send(held)
        elif not self._billed:  # the provider sent no usage: estimate from what was relayed
            prompt, completion = self._prompt(body), estimate_tokens(chars)
            await self._settle(model, body, prompt, completion)
            if relay_usage:  # the client asked for usage (or meta): it gets the estimate, marked so
                chunk = self._usage_chunk(model, last, {
                    "prompt_tokens": prompt, "completion_tokens": completion,
                    "total_tokens": prompt + completion, "estimated": True})
                self._add_meta(chunk, model)
                send(chunk)
        self.finish(self._sse_end())

    # ---- the client's stream format (hooks: handlers/messages.py sends the Messages API's events)
    def _sse(self, obj: dict) -> bytes:
        """One chunk (chat shape) as the client's bytes."""
        return sse.event(orjson.dumps(obj))

    def _sse_end(self) -> bytes:
        return sse.DONE

    def _sse_error(self, err: GatewayError, model_id: str) -> bytes:
        """One last chunk-shaped event with an `error` object: the openai client raises on it."""
        return sse.event(orjson.dumps({
            "id": "gen-" + self.request_id, "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model_id,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
            "error": err.body()["error"],
        }))

    def _usage_chunk(self, model, last: dict, usage: dict) -> dict:
        """A usage chunk of our own, shaped like the stream's last chunk."""
        return {"id": last.get("id") or "gen-" + self.request_id,
                "object": last.get("object") or "chat.completion.chunk",
                "created": last.get("created") or int(time.time()), "model": self.names.get(model.id, model.id),
                "provider": model.provider, "choices": [], "usage": usage}

    async def _cut(self, model, body, chars: int, error: Exception | None, usage: dict | None) -> None:
        """Mid-stream failure, client disconnect or shutdown: settle what was consumed, by the
        provider's last usage if it reported one, else by what the client was sent."""
        if not self._billed:
            code = CLIENT_CLOSED[1] if self._gone else "upstream_timeout" \
                if isinstance(error, UpstreamTimeout) else "upstream_error"
            if usage is not None:
                await self._settle(model, body, *usage_tokens(usage, self._prompt(body), chars), usage, code=code)
            elif chars:
                await self._settle(model, body, self._prompt(body), estimate_tokens(chars), code=code)
            else:
                await self._release(credit_free=True, outcome=(CLIENT_CLOSED[0] if self._gone else 200, code))
        if self._gone or self._finished:
            return
        if self._aborted:
            err = GatewayError("upstream_error", "The stream was cut by the gateway's shutdown.")
        elif isinstance(error, UpstreamTimeout):  # headers, then not one byte of the body
            err = GatewayError("upstream_timeout")
            self.failures.append((model.provider, "upstream_timeout"))
        else:
            err = GatewayError("upstream_error", "The provider's stream failed part-way.")
            self.failures.append((model.provider, "upstream_error"))
        self._finish_sse_error(err, model.id)

    def _finish_sse_error(self, err: GatewayError, model_id: str) -> None:
        """The stream's last event: the failure, in the client's format (_sse_error)."""
        self.error = err
        self._open_sse()
        try:
            self.finish(self._sse_error(err, model_id))
        except tornado.iostream.StreamClosedError:
            self._gone = True


def _client_wants_usage(body: dict) -> bool:
    opts, usage = body.get("stream_options"), body.get("usage")
    return (isinstance(opts, dict) and opts.get("include_usage") is True) or \
        (isinstance(usage, dict) and usage.get("include") is True)


def _finishes(payload: bytes, obj: dict) -> bool:
    """The chunk ends a choice: the provider is done generating (its usage event follows)."""
    if _NOT_DONE in payload:
        return False
    for choice in as_list(obj.get("choices")):
        if isinstance(choice, dict) and choice.get("finish_reason"):
            return True
    return False


async def _usage_after_leave(call, backlog: deque) -> dict | None:
    """The client left after the provider finished generating: wait a moment for the usage
    event the provider bills by, rather than bill an estimate that cannot see reasoning
    tokens and undercounts non-Latin text. Then the call is over either way."""
    deadline = time.monotonic() + USAGE_GRACE_S
    try:
        while True:
            while backlog:
                obj = _event_obj(backlog.popleft())
                if obj is None:  # [DONE], or something no usage will follow
                    return None
                if isinstance(obj.get("usage"), dict):
                    return obj["usage"]
            left = deadline - time.monotonic()
            if call.over or left <= 0:
                return None
            try:
                await asyncio.wait_for(call.wait(), left)
            except asyncio.TimeoutError:
                return None
    finally:
        call.cancel()


def _event_obj(payload: bytes) -> dict | None:
    """An event's JSON object; None for [DONE], malformed JSON or anything but an object."""
    if payload == b"[DONE]":
        return None
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _content_event(payload: bytes) -> dict | None:
    """The event as a dict when it is plain content (no usage, no error): what libcurl's
    callback may relay by itself. None for anything the relay's task must see."""
    obj = _event_obj(payload)
    if obj is None or isinstance(obj.get("usage"), dict) or isinstance(obj.get("error"), dict):
        return None
    return obj
