"""`upgate-admin payments list|show|verify`: top-up orders paid through a payment gateway
(upgate/payments/, docs/payments.md). `verify` reads the gateway's settings from the
environment like the gateway does (UPGATE_PAYMENTS, UPGATE_ZARINPAL_MERCHANT_ID, …)."""
from __future__ import annotations

import click

from admin_cli.account import refusals
from admin_cli.output import Refused, emit, json_option, kv_table, table
from upgate.payments import orders, service
from upgate.settings import SettingsError, from_env

COLUMNS = ["created", "order", "account", "amount", "gateway", "status", "bank ref", "paid"]
NOT_ASKED = {"unavailable": "the gateway did not answer", "refused": "the gateway refused the call",
             "off": "that gateway is not set up here (its UPGATE_* settings)"}


def _client():
    from admin_cli.main import redis_client

    return redis_client()


def _row(o: dict) -> list:
    return [o["created_at"], o["id"], o["account_id"], o["amount_toman"], o["gateway"], o["status"],
            o["ref_id"], o["paid_at"]]


@click.group()
def payments() -> None:
    """Top-up orders: list them, show one, verify one with its gateway now.

    \b
    Example:
      upgate-admin payments list --status pending
    """


@payments.command("list")
@click.option("--account", "account_id", help="Only this account's orders.")
@click.option("--status", type=click.Choice(orders.STATUSES), help="Only orders in this status.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--cursor", help="The next page: the next_cursor of the previous one.")
@json_option
def list_(account_id, status, limit, cursor, as_json) -> None:
    """Orders, newest first.

    \b
    Example:
      upgate-admin payments list --account 2f0c6a1e-… --json
    """
    with refusals():
        page = orders.list_orders(_client(), account_id=account_id, status=status, cursor=cursor, limit=limit)
    emit(page, table=table(f"{len(page['data'])} orders", COLUMNS, [_row(o) for o in page["data"]]),
         message=f"more: --cursor {page['next_cursor']}" if page["next_cursor"] else None)


@payments.command("show")
@click.argument("order_id")
@json_option
def show(order_id, as_json) -> None:
    """One order.

    \b
    Example:
      upgate-admin payments show ord_5f2c9a0e4b1d7c3a9e8f6b2d
    """
    with refusals():
        order = orders.public(orders.get(_client(), order_id))
    emit(order, table=kv_table(f"order {order_id}", order))


@payments.command("verify")
@click.argument("order_id")
@json_option
def verify(order_id, as_json) -> None:
    """Ask the order's gateway now whether it was paid (with the order's own amount) and credit
    it when so: exactly once, however often it is run. What to do when a customer says "I paid":
    docs/payments.md.

    \b
    Example:
      upgate-admin payments verify ord_5f2c9a0e4b1d7c3a9e8f6b2d --json
    """
    with refusals():
        try:
            settings = from_env()
        except SettingsError as e:
            raise Refused(str(e)) from None
        result = service.verify_id(_client(), settings, order_id)
    if result["outcome"] in NOT_ASKED:
        raise Refused(f"order {order_id} not verified: {NOT_ASKED[result['outcome']]}; it stays "
                      f"{result['order']['status']}")
    o = result["order"]
    emit(result, table=kv_table(f"order {order_id}: {result['outcome']}", o),
         message=f"{result['outcome']}: order {o['id']} is {o['status']}")
