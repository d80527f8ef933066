"""/admin/v1/webhooks/failed: the webhook deliveries given up after the retry window (the same
list as `upgate-admin webhook failed`, from upgate/webhooks/service.py)."""
from __future__ import annotations

from upgate.handlers.admin.base import AdminHandler
from upgate.handlers.admin.spec import Op, nullable, obj, TIME
from upgate.webhooks import service

FAILED = obj({
    "event": obj({"id": {"type": "string"}, "type": {"type": "string"}, "created": {"type": "integer"},
                  "data": {"type": "object"}}),
    "attempts": {"type": "integer"}, "first_attempt_at": TIME, "last_attempt_at": TIME,
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


HANDLERS = [FailedWebhooksHandler]
