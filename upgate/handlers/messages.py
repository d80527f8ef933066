"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API (DESIGN.md,
"Agent clients"), on the same keys, wallets, holds and limits as /v1/chat/completions.

MessagesHandler is the chat route with another wire format at the client's end: its body is
translated to the chat body the proxy validates, holds from (max_tokens), forwards and settles
(upgate/messages/request.py), and the chat answer, stream and errors are rendered back as a
Message, its SSE events and Anthropic-shaped errors through the proxy's hooks. Nothing of
billing is its own: rpm, the stream cap, holds, settle, cut streams, records, usage reports
and webhooks are the chat route's.
"""
from __future__ import annotations

import orjson

from upgate.billing import sizing
from upgate.billing.ledger import Rejected
from upgate.catalog.rules import check_allowed
from upgate.errors import GatewayError
from upgate.handlers import body_work
from upgate.handlers.base import BaseHandler
from upgate.handlers.proxy import ChatHandler
from upgate.handlers.requests import parse_json, validate
from upgate.messages import answer, errors
from upgate.messages.events import EventEncoder
from upgate.messages.request import to_chat

_MAX_BETA = 1024  # characters of an anthropic-beta header passed upstream


class MessagesFace:
    """What every Messages route shares: Anthropic-shaped errors (the spec's code kept) and the
    request id also in `request-id`, which the Anthropic SDKs read."""

    def set_default_headers(self) -> None:
        self._headers["request-id"] = self.request_id

    def error_bytes(self, err: GatewayError) -> bytes:
        return orjson.dumps(errors.body(err))


class MessagesHandler(MessagesFace, ChatHandler):
    _chat = None  # the translated chat body
    _encoder: EventEncoder | None = None

    def _request(self, body: dict):
        self._chat = to_chat(body)
        return validate(self._chat, "chat")

    def _upstream_headers(self, provider, headers: dict) -> dict:
        """An anthropic provider gets the client's `anthropic-beta` (the betas its body may
        use, as Claude Code sends them); other dialects get nothing of the Messages API."""
        headers = super()._upstream_headers(provider, headers)
        beta = self.request.headers.get("anthropic-beta")
        if provider.dialect == "anthropic" and beta and len(beta) <= _MAX_BETA and beta.isprintable():
            return {**headers, "anthropic-beta": beta}
        return headers

    @property
    def message_id(self) -> str:
        return "msg_" + self.request_id.removeprefix("req_")

    @property
    def client_model(self) -> str:
        """The model as the client named it (an alias such as `claude-opus-4-8` stays that)."""
        return self.names.get(self.model_id, self.model_id) or ""

    def _answer_bytes(self, obj: dict) -> bytes:
        return orjson.dumps(answer.from_chat(obj, obj.get("model") or self.client_model, self.message_id))

    def _events(self) -> EventEncoder:
        if self._encoder is None:
            estimate = self._prompt(self._chat) if self._chat is not None else 0
            self._encoder = EventEncoder(self.client_model, self.message_id, estimate)
        return self._encoder

    def _sse(self, obj: dict) -> bytes:
        encoder = self._events()
        if not encoder.started:  # message_start: a native provider's real input count, where it sent one
            encoder.start_usage(getattr(self._parser, "start_usage", None))
        return encoder.chunk(obj)

    def _sse_end(self) -> bytes:
        return self._events().end()

    def _sse_error(self, err: GatewayError, model_id: str) -> bytes:
        return self._events().error(errors.body(err))


def _count(raw: bytes) -> tuple[dict, int]:
    """A count_tokens body → (its chat body, the prompt estimate): body_work.py's part."""
    body = parse_json(raw, shape_checked=True)
    body.setdefault("max_tokens", 1)  # count_tokens takes none; the translation wants one
    chat = to_chat(body)
    return chat, sizing.prompt_tokens(chat)


class CountTokensHandler(MessagesFace, BaseHandler):
    """An estimate of a Messages request's input tokens (the one the hold is sized by), without
    going upstream: unbilled, but counted in the key's rpm window (one request, as on
    /v1/messages; a full window is the same 429), before any of the body's work."""

    needs_key = True
    keep_body = True

    async def post(self) -> None:
        raw = self.body_bytes()
        if self._finished or raw is None:
            return
        ctx, key = self.ctx, self.key
        try:
            ctx.refusals.check_rate(key.key_id)  # known full: 429 from memory
            rate = await ctx.ledger.rate_count(key.account_id, key.key_id, self.request_id)
        except Rejected as e:
            if e.rate is not None:
                self.set_rate(e.rate)
            ctx.refusals.note(key.key_id, key.account_id, e)
            raise
        self.set_rate(rate)
        chat, tokens = await body_work.run(len(raw), _count, raw)
        if not isinstance(chat["model"], str) or not chat["model"]:
            raise GatewayError("invalid_request", "`model` must be a non-empty string.")
        model = ctx.catalog.resolve(chat["model"])
        if "chat" not in model.capabilities:
            raise GatewayError("invalid_request", f"Model {model.id} does not support messages.")
        check_allowed(key.allowed_models, [model.id])
        self.write_json({"input_tokens": tokens})
