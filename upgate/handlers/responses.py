"""POST /v1/responses, when the operator turned it on (UPGATE_RESPONSES=on; off, the spec's 404
stays: handlers/base.py's ResponsesHandler). The chat route with the Responses API's wire format
at the client's end, as handlers/messages.py is with the Messages API's: the body is translated to
the chat body the proxy validates, holds from (max_output_tokens), forwards and settles
(upgate/responses/request.py), and the chat answer and stream are rendered back as a Response and
its events. Errors keep the spec's shape and codes, as on every /v1 route. Nothing of billing is
its own: rpm, the stream cap, holds, settle, cut streams, records, usage and webhooks are chat's.
"""
from __future__ import annotations

import orjson

from upgate.errors import GatewayError
from upgate.handlers.base import NotFoundHandler
from upgate.handlers.proxy import ChatHandler
from upgate.handlers.requests import validate
from upgate.responses import answer
from upgate.responses.events import EventEncoder
from upgate.responses.request import to_chat
from upgate.upstream.dialects import RESPONSES

_DROPPED_HEADER = "X-Svc-Dropped-Tools"


_DROPPED_SHOWN = 16  # built-in tool names named back at most (each at most 64 characters)


class ResponsesAPIHandler(ChatHandler):
    _chat = None  # the translated chat body
    _encoder: EventEncoder | None = None
    _response_shape: answer.Shape | None = None

    def _request(self, body: dict):  # (body_work.py may run it off the loop: no I/O, no headers)
        self._chat = to_chat(body)
        return validate(self._chat, "chat")

    def _wire(self, provider) -> tuple[str, str]:
        """A provider that speaks the Responses API gets the client's body, any other the chat
        translation; either way without the built-in tools, which the provider would bill per
        call and no hold here counts (upstream/responses.py), and the response names them (set
        here, on the loop, before anything is sent)."""
        if self._chat.dropped_tools:
            names = list(dict.fromkeys(self._chat.dropped_tools))
            # at most _DROPPED_SHOWN names: a proxy's default header buffer (4–8 KB) stays whole
            shown = ", ".join(names[:_DROPPED_SHOWN]) + (", ..." if len(names) > _DROPPED_SHOWN else "")
            self.set_header(_DROPPED_HEADER, shown)
        if provider.responses:
            return RESPONSES, "responses"
        return super()._wire(provider)

    def _dialect(self, model) -> str:
        provider = self.ctx.providers.get(model.provider)
        return RESPONSES if provider is not None and provider.responses else super()._dialect(model)

    @property
    def shape(self) -> answer.Shape:
        if self._response_shape is None:
            original = self._chat.original if self._chat is not None else {}
            model = self.names.get(self.model_id, self.model_id) or ""
            self._response_shape = answer.Shape("resp_" + self.request_id.removeprefix("req_"), model, original or {},
                                       self._chat.custom_tools if self._chat is not None else frozenset())
        return self._response_shape

    def _answer_bytes(self, obj: dict) -> bytes:
        return orjson.dumps(answer.from_chat(obj, self.shape))

    def _events(self) -> EventEncoder:
        if self._encoder is None:
            self._encoder = EventEncoder(self.shape)
        return self._encoder

    def _sse(self, obj: dict) -> bytes:
        return self._events().chunk(obj)

    def _sse_end(self) -> bytes:
        return self._events().end()

    def _sse_error(self, err: GatewayError, model_id: str) -> bytes:
        return self._events().error(err.body()["error"])


class StoredResponseHandler(NotFoundHandler):
    """GET / DELETE /v1/responses/{id} (and anything under it): nothing is stored."""

    def message(self) -> str:
        return "Responses are not stored by this gateway (it is stateless): there is nothing to read or delete."
