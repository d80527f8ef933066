"""What the operator calls (sync, like every service module): the failed deliveries, and a
test ping sent straight to the receiver. The CLI (`upgate-admin webhook`) and the management
API (`GET /admin/v1/webhooks/failed`) both call these."""
from __future__ import annotations

import asyncio

import orjson

from upgate import keyspace
from upgate.webhooks import events

MAX_LIMIT = 1000


class WebhookError(ValueError):
    """A refused webhook operation; the message is one line for the operator."""

    field: str | None = None


class WebhooksOff(WebhookError):
    """UPGATE_WEBHOOK_URL or UPGATE_WEBHOOK_SECRET is not set."""


class InvalidLimit(WebhookError):
    field = "limit"


def list_failed(client, limit: int = 100) -> list[dict]:
    """Deliveries given up after the retry window, newest first: {"event" (the body that was
    sent), "attempts", "first_attempt_at", "last_attempt_at", "last_status", "last_error"}."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidLimit(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    return [orjson.loads(raw) for raw in client.lrange(keyspace.WEBHOOK_FAILED, 0, limit - 1)]


def send_test(settings) -> dict:
    """POST one signed `ping` event to the receiver now (not through the stream, no retry):
    {"event_id", "url", "status" (None when it did not answer), "error", "ok" (a 2xx)}."""
    if not settings.webhooks_on:
        raise WebhooksOff("webhooks are off: set UPGATE_WEBHOOK_URL and UPGATE_WEBHOOK_SECRET")
    from upgate.webhooks.delivery import http_client, post

    body = events.ping()

    async def once():
        http = http_client()
        try:
            return await post(http, settings.webhook_url, settings.webhook_secret, body, settings.webhook_timeout_s)
        finally:
            http.close()

    status, error = asyncio.run(once())
    return {"event_id": orjson.loads(body)["id"], "url": settings.webhook_url, "status": status,
            "error": error, "ok": status is not None and 200 <= status < 300}
