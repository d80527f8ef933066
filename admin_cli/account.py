"""`upgate-admin account`: create accounts, top up or adjust wallets, show, list, suspend,
resume, and set the daily free-model quota. Amounts are decimal toman; JSON renders them as
strings with six fractional digits."""
from __future__ import annotations

from contextlib import contextmanager

import click

from admin_cli.output import Refused, emit, json_option, kv_table, table
from upgate.billing import jalali
from upgate.services import accounts
from upgate.settings import SettingsError, from_env


@contextmanager
def refusals():
    """Turn the service layer's refusals (one-line ValueError subclasses) into `Refused`: exit
    1, one line on stderr, no traceback. The line is the refusal's message in the vocabulary
    every face shares (upgate/services/refusals.py); an unknown id also says where it was
    looked for."""
    from upgate.services import refusals as vocabulary

    from admin_cli.main import store_hint

    try:
        yield
    except SettingsError as e:
        raise Refused(str(e)) from None
    except ValueError as e:
        r = vocabulary.refusal(e)
        raise Refused(f"{r.message}; {store_hint()}" if r.code == "not_found" else r.message) from None


def _client():
    from admin_cli.main import redis_client

    return redis_client()


def _iso(ts: int | None) -> str | None:
    return jalali.utc_iso(ts) if ts else None


def _free_quota_default() -> int:
    with refusals():
        return from_env().free_quota_default


def _account_json(v: dict, default_quota: int) -> dict:
    """The account object (accounts.account_object), the CLI's older names beside it."""
    return accounts.account_object(v, default_quota, old_names=True)


@click.group()
def account() -> None:
    """Accounts and their wallets (toman): create, topup, adjust, transactions, statement,
    show, list, suspend, resume, set-free-quota, set-low-balance.

    \b
    Example:
      upgate-admin account create --phone 09120000000 --balance 50000
    """


@account.command("create")
@click.option("--phone", required=True, metavar="P", help="7 to 15 digits, optional leading +.")
@click.option("--balance", metavar="AMOUNT", default="0", show_default=True,
              help="Opening balance in toman (decimal, at most six fractional digits).")
@json_option
def create(phone: str, balance: str, as_json: bool) -> None:
    """Create an account with a wallet; prints its id (a UUID).

    \b
    Example:
      upgate-admin account create --phone 09120000000 --balance 50000 --json
      {"id": "2f0c…", "phone": …, "status": "active", …, "account_id": "2f0c…", …}
    """
    default_quota = _free_quota_default()
    with refusals(), _durable():
        balance_micro = accounts.parse_amount(balance, what="balance_toman")
        phone = accounts.check_phone(phone)
        made = accounts.create(_client(), phone, balance_micro, default_quota, old_names=True)
    emit(made, message=f"created account {made['id']}")


def _txn_table(title: str, txns: list[dict]):
    t = table(title, ["time", "kind", "amount", "balance after", "ref", "note", "actor", "id"],
              [[x["time"], x["kind"], x["amount_toman"], x["balance_after_toman"], x["ref"],
                x["note"], x["actor"], x["id"]] for x in txns])
    for column in t.columns:  # ids and amounts must never be cut short
        column.overflow = "fold"
    return t


def _credited(result: dict, acct: str) -> None:
    txn = result["transaction"]
    word = "already recorded (replayed, nothing changed)" if result["replayed"] else "recorded"
    emit(result, message=f"account {acct}: {txn['kind']} of {txn['amount_toman']} toman {word} "
                         f"as {txn['id']}, balance {result['balance_toman']} toman")


@contextmanager
def _durable():
    from upgate.services import transactions

    try:
        yield
    except transactions.NotDurable as e:
        raise Refused(str(e)) from None


@account.command("topup", context_settings={"ignore_unknown_options": True})
@click.argument("account_id")
@click.argument("amount")
@click.option("--ref", metavar="REF", help="The payment's reference (≤128 printable characters): "
              "the same ref again changes nothing, so a retry is safe.")
@click.option("--note", metavar="TEXT", help="Why, for whoever reads the transactions later.")
@json_option
def topup(account_id: str, amount: str, ref: str | None, note: str | None, as_json: bool) -> None:
    """Record AMOUNT toman the customer paid (a `topup` transaction), atomically with the
    balance change. Give the payment gateway's reference as --ref: a repeated call with the
    same ref answers the first transaction (replayed) and credits nothing. A negative AMOUNT
    is recorded as an adjustment (kept for old scripts; prefer `account adjust`).

    \b
    Examples:
      upgate-admin account topup 2f0c6a1e-… 100000 --ref zp-A0000012345
      upgate-admin account topup 2f0c6a1e-… 100000 --ref zp-A0000012345 --json
    """
    from upgate.services import transactions

    with refusals(), _durable():
        acct = accounts.normalize_id(account_id)
        result = transactions.topup(_client(), acct, amount, ref=ref, note=note)
    _credited(result, acct)


@account.command("adjust", context_settings={"ignore_unknown_options": True})
@click.argument("account_id")
@click.argument("amount")
@click.option("--note", metavar="TEXT", required=True, help="Why (required).")
@click.option("--ref", metavar="REF", help="A reference that makes the call idempotent.")
@json_option
def adjust(account_id: str, amount: str, note: str, ref: str | None, as_json: bool) -> None:
    """Record a credit (AMOUNT > 0) or a debit (AMOUNT < 0) that is not a payment: a refund
    of a bad answer, a correction. The balance may go below zero.

    \b
    Examples:
      upgate-admin account adjust 2f0c6a1e-… 5000 --note "refund: outage 1405-09-02"
      upgate-admin account adjust 2f0c6a1e-… -2500 --note "duplicate credit" --ref fix-17
    """
    from upgate.services import transactions

    with refusals(), _durable():
        acct = accounts.normalize_id(account_id)
        result = transactions.adjust(_client(), acct, amount, note=note, ref=ref)
    _credited(result, acct)


def _csv_out(fields, rows: list[dict]) -> None:
    from upgate.services import csv_safe

    click.echo(csv_safe.write(fields, rows), nl=False)


@account.command("transactions")
@click.argument("account_id")
@click.option("--month", metavar="YYYY-MM", help="Only this Jalali month (Tehran time).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV: a header row, then one row each.")
@json_option
def transactions_(account_id: str, month: str | None, as_csv: bool, as_json: bool) -> None:
    """The account's transactions (opening, top-ups, adjustments), newest first.

    \b
    Example:
      upgate-admin account transactions 2f0c6a1e-… --month 1405-09 --csv
    """
    from upgate.services import transactions

    with refusals():
        txns = transactions.list_transactions(_client(), account_id, month=month)
    if as_csv and not as_json:
        _csv_out(transactions.CSV_FIELDS, txns)
        return
    emit({"transactions": txns}, table=_txn_table(f"{len(txns)} transactions", txns))


@account.command("show")
@click.argument("account_id")
@json_option
def show(account_id: str, as_json: bool) -> None:
    """Show one account: balance, held, available, suspended, free quota, key count.

    \b
    Example:
      upgate-admin account show 2f0c6a1e-… --json
    """
    default_quota = _free_quota_default()
    with refusals():
        view = accounts.show(_client(), account_id)
    result = _account_json(view, default_quota)
    shown = dict(result, suspended="yes" if result["suspended"] else "no")
    if result["free_quota_is_default"]:
        shown["free_quota"] = f"{result['free_quota']} (default)"
    del shown["free_quota_is_default"]
    emit(result, table=kv_table(f"account {result['account_id']}", shown))


@account.command("list")
@click.option("--phone", metavar="P", help="Only accounts with this phone number.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV of the accounts (with --phone: of that filter), "
              "newest first, with this month's spend.")
@json_option
def list_(phone: str | None, as_csv: bool, as_json: bool) -> None:
    """List every account, oldest first (or those with one phone number).

    \b
    Example:
      upgate-admin account list --phone 09120000000
      upgate-admin account list --csv > accounts.csv
    """
    default_quota = _free_quota_default()
    with refusals():
        if phone is not None:
            phone = accounts.check_phone(phone)
        if as_csv and not as_json:
            from upgate.services import account_list

            click.echo(account_list.export_csv(_client(), default_quota, q=phone or ""), nl=False)
            return
        views = accounts.list_accounts(_client(), phone=phone)
    rows = [_account_json(v, default_quota) for v in views]
    t = table(f"{len(rows)} accounts",
              ["account id", "phone", "balance", "held", "available", "state", "free quota",
               "keys", "created"],
              [[a["account_id"], a["phone"], a["balance_toman"], a["held_toman"],
                a["available_toman"], "suspended" if a["suspended"] else "active",
                a["free_quota"], a["key_count"], a["created_at"]] for a in rows])
    for column in t.columns:  # ids and amounts must never be cut short
        column.overflow = "fold"
    emit({"accounts": rows}, table=t)


def _suspension(account_id: str, suspend: bool, reason: str | None) -> None:
    default_quota = _free_quota_default()
    with refusals():
        acct = accounts.normalize_id(account_id)
        obj, changed = accounts.set_status(_client(), acct, suspend, default_quota, reason=reason, old_names=True)
    word = "suspended" if suspend else "resumed"
    note = "" if changed else f" (it already was {'suspended' if suspend else 'active'})"
    emit(dict(obj, changed=changed), message=f"account {acct} {word}{note}")


_reason = click.option("--reason", metavar="TEXT", help="Why (one line): in the admin log and the webhook.")


@account.command("suspend")
@click.argument("account_id")
@_reason
@json_option
def suspend(account_id: str, reason: str | None, as_json: bool) -> None:
    """Suspend an account: every key of it gets 403 account_suspended from the next request
    on (all gateway nodes are told at once). Undo with `account resume`.

    \b
    Example:
      upgate-admin account suspend 2f0c6a1e-… --reason "chargeback on order 1405-88"
    """
    _suspension(account_id, True, reason)


@account.command("resume")
@click.argument("account_id")
@_reason
@json_option
def resume(account_id: str, reason: str | None, as_json: bool) -> None:
    """Lift a suspension: the account's keys work again from the next request on.

    \b
    Example:
      upgate-admin account resume 2f0c6a1e-… --reason "paid"
    """
    _suspension(account_id, False, reason)


def _patch(account_id: str, **changes) -> dict:
    """accounts.patch with each setting's operator text parsed by its service rule
    (`name=(parse, text)`): the account object after it, old names beside."""
    default_quota = _free_quota_default()
    with refusals():
        parsed = {name: parse(text) for name, (parse, text) in changes.items()}
        return accounts.patch(_client(), accounts.normalize_id(account_id), default_quota, old_names=True, **parsed)


@account.command("set-free-quota", context_settings={"ignore_unknown_options": True})
@click.argument("account_id")
@click.argument("n")
@json_option
def set_free_quota(account_id: str, n: str, as_json: bool) -> None:
    """Set how many `:free` model requests the account may make per Tehran day (0 = none).
    N may be the word `default` to go back to the deployment default
    (UPGATE_FREE_QUOTA_DEFAULT, 50 unless set).

    \b
    Examples:
      upgate-admin account set-free-quota 2f0c6a1e-… 200
      upgate-admin account set-free-quota 2f0c6a1e-… default
    """
    obj = _patch(account_id, free_quota=(accounts.parse_free_quota, n))
    emit(obj, message=f"account {obj['id']}: free quota {obj['free_quota_per_day']} requests per day"
                      + (" (the default)" if obj["free_quota_is_default"] else ""))


@account.command("set-low-balance", context_settings={"ignore_unknown_options": True})
@click.argument("account_id")
@click.argument("amount", metavar="AMOUNT|off")
@json_option
def set_low_balance(account_id: str, amount: str, as_json: bool) -> None:
    """Send a `wallet.low_balance` webhook when the account's available balance falls below
    AMOUNT toman (once per crossing); `off` sends none. The API's low_balance_toman.

    \b
    Examples:
      upgate-admin account set-low-balance 2f0c6a1e-… 20000
      upgate-admin account set-low-balance 2f0c6a1e-… off
    """
    obj = _patch(account_id, low_balance_micro=(accounts.parse_low_balance, amount))
    low = obj["low_balance_toman"]
    emit(obj, message=f"account {obj['id']}: " + (f"low-balance alert below {low} toman" if low is not None
                                                  else "no low-balance alert"))


@account.command("statement")
@click.argument("account_id")
@click.option("--month", metavar="YYYY-MM", help="Jalali month (default: the current Tehran month).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV: opening balance, transactions and daily "
              "charges in date order, closing balance.")
@json_option
def statement(account_id: str, month: str | None, as_csv: bool, as_json: bool) -> None:
    """One Jalali month of the account: opening balance, top-ups, adjustments, charges, closing
    balance (closing = opening + topups + adjustments − charges, to the micro-toman).

    \b
    Example:
      upgate-admin account statement 2f0c6a1e-… --month 1405-09 --csv > 1405-09.csv
    """
    from upgate.services import statements

    with refusals():
        st = statements.statement(_client(), account_id, month)
    if as_csv and not as_json:
        click.echo(statements.to_csv(st), nl=False)
        return
    summary = {k: st[k] for k in ("account_id", "month", "opening_balance_toman", "topups_toman",
                                  "adjustments_toman", "charges_toman", "closing_balance_toman",
                                  "requests")}
    emit(st, table=kv_table(f"statement {st['month']}", summary))
