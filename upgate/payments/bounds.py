"""How much of the payment gateway one customer can use (docs/security.md, "Payments").

A signed-in customer made 200 orders in half a second, each a `request.json` call to the
gateway, and 1,000 junk orders made reconciliation spend its passes on them while another
customer's paid order waited. So:

- Starting an order: at most PENDING_PER_ACCOUNT of the account's orders pending at once.
- Every gateway call a customer causes (an order started, a return from the bank verified) is
  counted in sliding hour windows, per account (CALLS_PER_ACCOUNT_HOUR) and per client address
  (CALLS_PER_ADDRESS_HOUR), by lua/signin_rate.lua; past either, `TooManyPayments` (429) and
  nothing is asked of the gateway. The dashboard counts the calls it makes in /metrics.
- Reconciliation is fair: each pass verifies at most RECONCILE_PER_ACCOUNT orders of an account,
  its oldest first, taking every account's first before any account's second
  (`orders.open_fairly`), so a paid order is verified within one pass whatever others do.
"""
from __future__ import annotations

import secrets

from upgate.services.account_rules import AccountError
from upgate.store import connection as store, keyspace

PENDING_PER_ACCOUNT = 3
CALLS_PER_ACCOUNT_HOUR = 30
CALLS_PER_ADDRESS_HOUR = 60
RECONCILE_PER_ACCOUNT = 3
HOUR_MS = 3_600_000


class TooManyPayments(AccountError):
    """Too many payments started or checked: wait before the next one."""

    field = "amount_toman"
    reason = "topup_too_many"


def check_pending(client, account_id: str) -> None:
    """Refuse a new order while the account has PENDING_PER_ACCOUNT pending ones (the newest
    orders are the only ones that can still be: an older one is expired by reconciliation)."""
    recent = [store.text(m) for m in client.zrevrange(keyspace.orders(account_id), 0, 4 * PENDING_PER_ACCOUNT)]
    if not recent:
        return
    open_ = client.zmscore(keyspace.PAYMENTS_OPEN, [f"{account_id}|{o}" for o in recent])
    if sum(1 for s in open_ if s is not None) >= PENDING_PER_ACCOUNT:
        raise TooManyPayments(f"{PENDING_PER_ACCOUNT} top-ups are already waiting for payment: "
                              "finish or cancel one first", reason="topup_pending", n=PENDING_PER_ACCOUNT)


def count_call(client, account_id: str, address: str | None) -> None:
    """One gateway call caused by this customer: counted, or `TooManyPayments` (nothing counted
    in the window that refused; the account's is checked first)."""
    windows = [(keyspace.payment_asks(account_id), CALLS_PER_ACCOUNT_HOUR)]
    if address:
        windows.append((keyspace.payment_asks_from(address), CALLS_PER_ADDRESS_HOUR))
    for key, cap in windows:
        status, wait = store.script("signin_rate").call_sync(client, [key], [cap, HOUR_MS, secrets.token_hex(8), 0])
        if int(status):
            wait_s = max(1, -(-int(wait) // 1000))
            raise TooManyPayments(f"too many payments started or checked in the last hour; "
                                  f"try again in {wait_s} s", wait_s=wait_s)

