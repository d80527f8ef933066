"""What the operator calls (sync, like every service module): the failed deliveries, sending
them again, and a test ping sent straight to the receiver. The CLI (`upgate-admin webhook`) and
the management API (`/admin/v1/webhooks/...`) both call these."""
from __future__ import annotations

import asyncio

import orjson

from upgate.store import connection as store, keyspace
from upgate.webhooks import events

MAX_LIMIT = 1000


class WebhookError(ValueError):
    """A refused webhook operation; the message is one line for the operator."""

    field: str | None = None


class WebhooksOff(WebhookError):
    """UPGATE_WEBHOOK_URL or UPGATE_WEBHOOK_SECRET is not set."""


class InvalidLimit(WebhookError):
    field = "limit"


class UnknownEvent(WebhookError):
    """No failed delivery of this event id is kept (never given up, or sent again already)."""

    field = "event_id"


def list_failed(client, limit: int = 100) -> list[dict]:
    """Deliveries given up, newest first: {"event" (the body that was sent), "reason"
    (`expired`: the retry window ran out; `overflow`: moved from a full outbox), "attempts", "first_attempt_at", "last_attempt_at", "last_status", "last_error"}."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidLimit(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    out = [orjson.loads(raw) for raw in client.lrange(keyspace.WEBHOOK_FAILED, 0, limit - 1)]
    for entry in out:  # given up before reasons were recorded: the retry window ran out
        entry.setdefault("reason", "expired")
    return out


def resend(client, event_id: str | None = None) -> list[str]:
    """Send given-up deliveries again (lua/webhook_resend.lua): the one of `event_id`, or every
    one when it is None. Returns the ids put back on the stream; `UnknownEvent` when `event_id`
    is not in the failed list. The nodes deliver them as any event, retrying for the window."""
    if event_id is not None and (not isinstance(event_id, str) or not event_id.startswith("evt_")
                                 or len(event_id) > 64 or not event_id.isprintable()):
        raise UnknownEvent(f"no failed delivery of event {event_id!r} (event ids look like evt_…)")
    script, sent = store.script("webhook_resend"), []
    for raw in client.lrange(keyspace.WEBHOOK_FAILED, 0, -1):
        event = orjson.loads(raw)["event"]
        if event_id is not None and event.get("id") != event_id:
            continue
        account = (event.get("data") or {}).get("account_id") or ""
        if script.call_sync(client, [keyspace.WEBHOOK_FAILED, keyspace.WEBHOOK_STREAM],
                            [raw, account, event["id"], orjson.dumps(event)]):  # the body as sent
            sent.append(event["id"])
        if event_id is not None:
            break
    if event_id is not None and not sent:
        raise UnknownEvent(f"no failed delivery of event {event_id} (never given up, or sent again already)")
    return sent


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
