"""/admin/v1/webhooks/failed: the webhook deliveries given up after the retry window, and
/admin/v1/webhooks/resend: send them again (`upgate-admin webhook failed|resend`, both from
upgate/webhooks/service.py)."""
from __future__ import annotations

from upgate.errors import GatewayError
from upgate.handlers.admin.base import AdminHandler
from upgate.handlers.admin.spec import Op, nullable, obj, TIME
from upgate.webhooks import service

FAILED = obj({
    "event": obj({"id": {"type": "string"}, "type": {"type": "string"}, "created": {"type": "integer"},
                  "data": {"type": "object"}}),
    "reason": {"type": "string", "enum": ["expired", "overflow"]},
    "attempts": {"type": "integer"}, "first_attempt_at": nullable(TIME), "last_attempt_at": TIME,
    "last_status": nullable({"type": "integer"}), "last_error": nullable({"type": "string"})})


class FailedWebhooksHandler(AdminHandler):
    PATH = "/admin/v1/webhooks/failed"
    OPS = {"get": Op("Webhook events given up after retrying for the retry window (24 h), newest first: "
                     "the body that was sent, the attempts and the last outcome.",
                     obj({"data": {"type": "array", "items": FAILED}}),
                     query={"limit": {"type": "integer", "minimum": 1, "maximum": service.MAX_LIMIT}})}

    async def get(self) -> None:
        limit = self.int_query("limit", 100, 1, service.MAX_LIMIT)
        self.write_json({"data": await self.call(service.list_failed, limit)})


class ResendWebhooksHandler(AdminHandler):
    PATH = "/admin/v1/webhooks/resend"
    OPS = {"post": Op("Send given-up deliveries again: the one of event_id, or all of them with "
                      "{\"all\": true}. They leave the failed list; the nodes deliver them as any event, "
                      "retrying for the retry window. 404 when event_id is not in the failed list.",
                      obj({"resent": {"type": "array", "items": {"type": "string"}}}),
                      body=obj({"event_id": {"type": "string"}, "all": {"type": "boolean"}}))}

    async def post(self) -> None:
        body = self.json_body(("event_id", "all"))
        event_id, every = body.get("event_id"), body.get("all")
        if every not in (None, True, False) or (event_id is None) == (every is not True):
            raise GatewayError("invalid_request", "Give event_id, or all: true.", param="event_id")
        self.write_json({"resent": await self.call(service.resend, event_id)})


class TestWebhookHandler(AdminHandler):
    PATH = "/admin/v1/webhooks/test"
    OPS = {"post": Op("Send one signed `ping` event to the receiver now (`upgate-admin webhook test`) and "
                      "answer its outcome; 400 when webhooks are not configured.",
                      obj({"event_id": {"type": "string"}, "url": {"type": "string"}, "ok": {"type": "boolean"},
                           "status": nullable({"type": "integer"}), "error": nullable({"type": "string"})}))}

    async def post(self) -> None:
        self.json_body(())
        settings = self.ctx.settings
        self.write_json(await self.call(lambda _client: service.send_test(settings)))


HANDLERS = [FailedWebhooksHandler, ResendWebhooksHandler, TestWebhookHandler]
