"""The payment operations every face calls (dashboard, CLI, management API, console, the
reconciler): start a payment, verify an order (and credit it), handle a callback, reconcile.
Blocking functions over the sync Redis client and the gateway's HTTP calls: the gateway runs
them in its thread pool, never on the event loop.

Exactly once: a paid order is credited only through lua/credit.lua with kind `topup`, ref
`<gateway>:<authority>` and the order's key, which (in one atomic step) refuses a credit whose
amount or ref is not the order's, applies the first and replays every later one, and marks the
order paid. Any number of callbacks, reconciliation passes and nodes may race: one credit.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from upgate.i18n import numbers
from upgate.payments import bounds, gateways, orders, units
from upgate.payments.errors import (AmountMismatch, GatewayRefused, GatewayUnavailable, NotPaid,
                                    PaymentError, PaymentsOff)
from upgate.services import transactions
from upgate.services.account_rules import AccountError, UnknownAccount, normalize_id
from upgate.store import connection as store, keyspace

log = logging.getLogger("upgate")

ACTOR = "payment"
SILENT_STOP = 3  # a reconciliation pass stops after this many unanswered gateway calls in a row
CALLBACK_PATH = "/dashboard/topup/callback"


class InvalidTopup(AccountError):
    """The amount is outside the top-up limits, not whole toman, or the account may not pay."""

    field = "amount_toman"


@dataclass
class Outcome:
    """What a verify did: `outcome` is one of paid (credited now), already_paid, not_paid,
    amount_mismatch, unavailable, refused, off, conflict (its ref was used for another
    transaction: an operator's); `order` is the order as it is now."""

    order: dict
    outcome: str
    balance_toman: str | None = None

    def as_dict(self) -> dict:
        return {"order": orders.public(self.order), "outcome": self.outcome}


def check_amount(settings, amount_text) -> int:
    """A top-up amount from a form → whole toman within UPGATE_TOPUP_MIN/MAX_TOMAN."""
    try:
        toman = numbers.whole(amount_text if isinstance(amount_text, str) else str(amount_text or ""))
    except numbers.NumberError:
        raise InvalidTopup("enter a whole number of toman", reason="topup_malformed") from None
    if not settings.topup_min_toman <= toman <= settings.topup_max_toman:
        raise InvalidTopup(f"a top-up is {settings.topup_min_toman} to {settings.topup_max_toman} toman",
                           reason="topup_range", low_toman=settings.topup_min_toman,
                           high_toman=settings.topup_max_toman)
    return toman


def start(client, settings, account_id: str, amount_text, *, driver=None,
          address: str | None = None) -> tuple[dict, str]:
    """A new pending order and its payment at the gateway: (order, the bank page's address).
    A gateway that refuses or does not answer ends the order `failed` and raises. Bounded per
    account and per client `address` (payments/bounds.py: `TooManyPayments`)."""
    if settings.payments == "off":
        raise PaymentsOff("payments are off (UPGATE_PAYMENTS)")
    toman = check_amount(settings, amount_text)
    acct = normalize_id(account_id)
    wallet = store.text_map(client.hgetall(keyspace.wallet(acct)))
    if not wallet:
        raise UnknownAccount(f"unknown account {acct}")
    if wallet.get("suspended") == "1":
        raise InvalidTopup("a suspended account cannot pay", reason="suspended")
    bounds.check_pending(client, acct)
    bounds.count_call(client, acct, address)
    driver = driver or gateways.build(settings, client)
    order = orders.create(client, acct, units.micro(toman), driver.name)
    callback = (settings.public_url or "") + CALLBACK_PATH
    try:
        authority = driver.request(amount_toman=toman, callback_url=callback,
                                   description=f"upgate top-up {order['id']}", order_id=order["id"],
                                   mobile=wallet.get("phone") or None)
    except PaymentError as e:
        log.warning("payment request refused for order %s (%s: %s)", order["id"], type(e).__name__, e)
        orders.end(client, order, "failed", f"request: {e}")
        orders.close(client, order)
        raise
    order = orders.set_authority(client, order, authority)
    return orders.public(order), driver.pay_url(authority)


def verify(client, settings, order: dict, *, driver=None) -> Outcome:
    """Ask the order's gateway, with the order's own amount, whether it was paid; credit it when
    so (exactly once). Never raises for the gateway's answers: the outcome says what happened."""
    if order["status"] == "paid":
        return Outcome(order, "already_paid")
    if not order["authority"]:
        return Outcome(order, "not_paid")
    try:
        driver = driver or gateways.build(settings, client, order["gateway"])
        verified = driver.verify(order["authority"], units.whole_toman(order["_amount"]), order["id"])
    except AmountMismatch as e:
        log.error("payment of order %s: %s; NOT credited (docs/payments.md, \"I paid\")", order["id"], e)
        return Outcome(order, e.outcome)
    except (NotPaid, GatewayUnavailable, GatewayRefused, PaymentsOff) as e:
        if not isinstance(e, NotPaid):
            log.warning("payment of order %s not verified (%s: %s); it stays %s", order["id"],
                        type(e).__name__, e, order["status"])
        return Outcome(order, e.outcome)
    try:
        result = transactions.credit(
            client, order["account_id"], "topup", order["_amount"], ref=order["_ref"],
            note=f"{order['gateway']} payment, bank ref {verified.ref_id or '-'}", actor=ACTOR,
            order_id=order["id"], bank={"ref_id": verified.ref_id, "card_pan": verified.card_pan})
    except transactions.NotDurable as e:  # applied (and the order paid) on the master
        log.warning("payment of order %s credited; %s", order["id"], e)
        result = e.result
    except (transactions.IdempotencyConflict, transactions.OrderMismatch) as e:
        log.error("payment of order %s verified but NOT credited: %s", order["id"], e)
        return Outcome(order, "conflict")
    after = orders.get(client, order["id"])
    orders.close(client, after)
    return Outcome(after, "already_paid" if result["replayed"] else "paid", result["balance_toman"])


def verify_id(client, settings, order_id: str) -> dict:
    """`payments verify ORDER_ID` (CLI, API, console): verify now, credit when paid."""
    return verify(client, settings, orders.get(client, order_id)).as_dict()


def callback(client, settings, args: dict[str, str], account_id: str | None = None,
             address: str | None = None) -> Outcome | None:
    """The browser came back from the gateway. Finds the order by the configured gateway's
    authority (another gateway's or an unknown one finds nothing: None), verifies it whatever
    the callback claims, and ends it `failed` when the gateway says it was not paid.
    `account_id` (the signed-in customer): another account's order is None, like an unknown
    one, and nothing is asked of the gateway for it."""
    try:
        driver = gateways.build(settings, client)
    except PaymentsOff:
        return None
    claim = driver.callback(args)
    if claim is None:
        return None
    order = orders.by_authority(client, driver.name, claim.authority)
    if order is None or (account_id is not None and order["account_id"] != account_id):
        return None
    if account_id is not None and order["status"] != "paid":  # a customer's return asks the gateway
        bounds.count_call(client, account_id, address)
    done = verify(client, settings, order, driver=driver)
    if done.outcome in ("not_paid", "amount_mismatch"):
        why = "the gateway says not paid" if done.outcome == "not_paid" else "the amount paid differs"
        done.order = orders.end(client, done.order, "failed", f"callback: {why}")
    return done


def reconcile(client, settings, *, now_ms: int | None = None, limit: int = 20_000) -> dict:
    """One pass over the open orders (fairly: payments/bounds.py): verify each again, credit the paid, expire
    those unpaid after UPGATE_PAYMENTS_EXPIRE_S. A gateway that does not answer leaves its
    orders open, and after SILENT_STOP silences in a row the pass ends (the next one tries
    again) rather than wait out a timeout per order. Returns the count of each outcome (and `expired`)."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    expire_ms = int(settings.payments_expire_s * 1000)
    counts: dict[str, int] = {}
    silent = 0  # gateway calls in a row that got no answer: a gateway that is down ends the pass
    _unknown_paid(client, settings)
    for acct, order_id in orders.open_fairly(client, bounds.RECONCILE_PER_ACCOUNT, limit):
        if silent >= SILENT_STOP:
            break
        try:
            order = orders.get(client, order_id)
        except orders.UnknownOrder:
            client.zrem(keyspace.PAYMENTS_OPEN, f"{acct}|{order_id}")
            continue
        if order["status"] == "paid":
            orders.close(client, order)
            continue
        done = verify(client, settings, order)
        counts[done.outcome] = counts.get(done.outcome, 0) + 1
        silent = silent + 1 if done.outcome == "unavailable" else 0
        if done.outcome in ("paid", "already_paid", "unavailable", "off"):
            continue  # credited and closed, or nothing known: asked again next pass
        if now_ms - order["_created_ms"] >= expire_ms:
            if done.order["status"] == "pending":
                orders.end(client, done.order, "expired", f"unpaid after {expire_ms // 60000} min")
                counts["expired"] = counts.get("expired", 0) + 1
            orders.close(client, done.order)
    return counts


def _unknown_paid(client, settings) -> None:
    """Zarinpal lists payments made but never verified: each should be an order of ours (it is
    verified in this pass); one that is not is logged for the operator."""
    try:
        driver = gateways.build(settings, client)
        listed = driver.unverified()
    except PaymentError:
        return
    for authority in listed:
        if orders.by_authority(client, driver.name, authority) is None:
            log.warning("gateway %s reports a paid, unverified payment %s with no order here",
                        driver.name, authority[:64])

