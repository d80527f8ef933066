"""`upgate-admin webhook`: send a test event to the receiver, list failed deliveries and send
them again.
Reads UPGATE_WEBHOOK_URL and UPGATE_WEBHOOK_SECRET like the gateway (docs/webhooks.md)."""
from __future__ import annotations

import click

from admin_cli.output import Refused, emit, json_option, table
from upgate.settings import SettingsError, from_env
from upgate.webhooks import service


@click.group()
def webhook() -> None:
    """Webhooks: test the receiver, list failed deliveries, send them again.

    \b
    Example:
      upgate-admin webhook test
    """


@webhook.command("test")
@json_option
def test(as_json: bool) -> None:
    """Send one signed `ping` event to UPGATE_WEBHOOK_URL now and print the receiver's status.
    Exits 1 when the receiver does not answer with a 2xx.

    \b
    Example:
      upgate-admin webhook test --json
    """
    try:
        result = service.send_test(from_env())
    except (SettingsError, service.WebhookError) as e:
        raise Refused(str(e)) from None
    if not result["ok"]:
        why = f"HTTP {result['status']}" if result["status"] is not None else result["error"]
        raise Refused(f"the receiver did not accept the ping ({why})")
    emit(result, message=f"ping {result['event_id']} delivered: HTTP {result['status']}")


@webhook.command("failed")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many, newest first.")
@json_option
def failed(limit: int, as_json: bool) -> None:
    """Events given up after retrying for the retry window (24 h), newest first.

    \b
    Example:
      upgate-admin webhook failed --limit 20 --json
    """
    from admin_cli.main import redis_client

    try:
        rows = service.list_failed(redis_client(), limit)
    except service.WebhookError as e:
        raise Refused(str(e)) from None
    t = table("failed webhook deliveries", ["event", "type", "account", "attempts", "last attempt", "last outcome"],
              [[r["event"]["id"], r["event"]["type"], r["event"]["data"].get("account_id"), r["attempts"],
                r["last_attempt_at"], f"HTTP {r['last_status']}" if r["last_status"] else r["last_error"]]
               for r in rows])
    emit({"failed": rows}, table=t)


@webhook.command("resend")
@click.argument("event_id", required=False)
@click.option("--all", "every", is_flag=True, help="Every failed delivery.")
@json_option
def resend(event_id: str | None, every: bool, as_json: bool) -> None:
    """Send a given-up delivery again (after a receiver outage): it leaves the failed list and
    the nodes deliver it as any event, retrying for the retry window. Receivers de-duplicate by id.

    \b
    Examples:
      upgate-admin webhook resend evt_0a1b2c3d4e5f0197b3c2d1e0a1
      upgate-admin webhook resend --all
    """
    from admin_cli.main import redis_client

    if (event_id is None) == (not every):
        raise Refused("give one EVENT_ID or --all")
    try:
        sent = service.resend(redis_client(), event_id)
    except service.WebhookError as e:
        raise Refused(str(e)) from None
    emit({"resent": sent}, message=f"{len(sent)} event(s) back on the delivery stream: {', '.join(sent) or 'none'}")
