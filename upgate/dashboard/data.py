"""What each dashboard page shows, gathered in one sync call per page (run in the executor),
always for the signed-in account only (its id comes from the session, never from the page).

Only composition: every number comes from the service functions the CLI, the management API
and the console call; nothing here decides, validates or computes money.
"""
from __future__ import annotations

from upgate.billing import jalali, money
from upgate.payments import orders
from upgate.services import accounts, keys, account_requests, statements, transactions, usage

LOW_BALANCE_DEFAULT_MICRO = 10_000 * money.MICRO  # warn below this when the account set no threshold


def check_month(month: str | None) -> str:
    """The asked-for month (default: this one), or `InvalidMonth` when malformed or not begun."""
    current = jalali.month_key()
    if not month:
        return current
    month = statements.check_month(month)
    if month > current:
        raise statements.InvalidMonth(f"month {month} has not begun yet")
    return month


def months_back(n: int = 12) -> list[str]:
    """This month and the n-1 before it, newest first (the month pickers)."""
    y, m = (int(x) for x in jalali.month_key().split("-"))
    out = []
    for _ in range(n):
        out.append(f"{y:04d}-{m:02d}")
        y, m = (y - 1, 12) if m == 1 else (y, m - 1)
    return out


def home(client, account_id: str) -> dict:
    view = accounts.show(client, account_id)
    month = jalali.month_key()
    days = usage.month_days(month)
    raw = usage.fetch(client, account_id, days)
    threshold = view["low_balance_micro"]
    low = view["available_micro"] < (threshold if threshold is not None else LOW_BALANCE_DEFAULT_MICRO)
    return {"wallet": view, "month": month, "days": usage.by_day(days, usage.report(raw, "day")),
            "month_totals": usage.report(raw, "model")["totals"], "low": low}


def key_list(client, account_id: str) -> tuple[list[dict], dict]:
    """The keys, and per key its last use and 30 days of cost (account_requests.key_figures)."""
    listed = keys.list_keys(client, account_id)
    return listed, account_requests.key_figures(client, account_id, [k["key_id"] for k in listed])


def usage_page(client, account_id: str, month: str) -> dict:
    days = usage.month_days(month)
    raw = usage.fetch(client, account_id, days)
    names = {k["key_id"]: k for k in keys.list_keys(client, account_id)}
    return {"month": month, "days": usage.by_day(days, usage.report(raw, "day")),
            "models": usage.report(raw, "model"), "keys": usage.report(raw, "key"), "key_names": names}


def bank_refs(client, account_id: str) -> dict[str, str]:
    """transaction id → the bank's reference of the paid order it credited (what a customer's
    statement says of a payment, in their words, instead of the gateway's note)."""
    paid = orders.list_orders(client, account_id=account_id, status="paid", limit=200)["data"]
    return {o["transaction_id"]: o.get("ref_id") or "" for o in paid if o.get("transaction_id")}


def billing_page(client, account_id: str, month: str) -> dict:
    return {"month": month, "statement": statements.statement(client, account_id, month),
            "transactions": transactions.list_transactions(client, account_id, month=month),
            "bank_refs": bank_refs(client, account_id)}


def statement_file(client, account_id: str, month: str) -> tuple[list[dict], dict[str, str]]:
    """The statement's rows (statements.rows, the same as every face's file) and the bank
    references of its payments; the page writes them in its reader's words."""
    return statements.rows(statements.statement(client, account_id, month)), bank_refs(client, account_id)
