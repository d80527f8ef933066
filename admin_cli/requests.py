"""`upgate-admin requests ACCOUNT_ID` and `upgate-admin request show REQUEST_ID`: the kept
request records (no content: what each request cost and how it went)."""
from __future__ import annotations

import click

from admin_cli.account import _csv_out, refusals
from admin_cli.output import emit, json_option, kv_table, table
from upgate.services import records


def _client():
    from admin_cli.main import redis_client

    return redis_client()


@click.command("requests")
@click.argument("account_id")
@click.option("--limit", type=click.IntRange(1, records.MAX_LIMIT), default=50, show_default=True,
              help="How many of the newest records.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV: a header row, then one row each.")
@json_option
def requests(account_id: str, limit: int, as_csv: bool, as_json: bool) -> None:
    """The account's newest request records, newest first (kept UPGATE_REQUEST_LOG_DAYS days,
    at most UPGATE_REQUEST_LOG_MAX per account).

    \b
    Example:
      upgate-admin requests 2f0c6a1e-… --limit 20 --csv
    """
    with refusals():
        rows = records.list_requests(_client(), account_id, limit=limit)
    if as_csv and not as_json:
        _csv_out(records.PUBLIC, rows)
        return
    t = table(f"{len(rows)} requests",
              ["time", "request id", "model", "answered by", "status", "code", "prompt",
               "completion", "cost", "ms"],
              [[x["time"], x["request_id"], x["model"], x["provider"], x["status"], x["code"],
                x["prompt_tokens"], x["completion_tokens"], x["cost_toman"], x["duration_ms"]]
               for x in rows])
    for column in t.columns:
        column.overflow = "fold"
    emit({"requests": rows}, table=t)


@click.group("request")
def request() -> None:
    """One request's record, by the id a client quotes (X-Svc-Request-Id)."""


@request.command("show")
@click.argument("request_id")
@json_option
def show(request_id: str, as_json: bool) -> None:
    """Show the record of one request: account, key, model, tokens, cost, timings.

    \b
    Example:
      upgate-admin request show req_3f9a0c1b2d4e5f60718293a4
    """
    with refusals():
        rec = records.find(_client(), request_id)
    emit(rec, table=kv_table(f"request {rec['request_id']}", rec))


@request.command("search")
@click.option("--from", "start", metavar="YYYY-MM-DD", help="From this Jalali day, Tehran (default: today).")
@click.option("--to", "end", metavar="YYYY-MM-DD", help="To this Jalali day, included (at most 31 days).")
@click.option("--model", metavar="ID", help="Only this model (asked for or answering).")
@click.option("--key", metavar="KEY_ID", help="Only this key's requests.")
@click.option("--status", metavar="HTTP", help="Only this HTTP status (200, 402, 429, …).")
@click.option("--code", metavar="CODE", help="Only this error code (insufficient_balance, …; ok = none).")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="Records per page.")
@click.option("--cursor", metavar="C", help="The next_cursor of the previous page.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV: a header row, then one row each.")
@json_option
def search(start, end, model, key, status, code, limit: int, cursor, as_csv: bool, as_json: bool) -> None:
    """Find requests across every account — settled and refused — newest first, by Jalali
    period, model, key, HTTP status and code. Bounded: at most 31 days and 50,000 records read;
    `capped` says when the period held more (narrow it, or give --key).

    \b
    Example:
      upgate-admin request search --from 1405-09-01 --to 1405-09-03 --status 402
    """
    from upgate.services import request_search

    with refusals():
        found = request_search.search(_client(), start=start, end=end, model=model, key=key, status=status,
                                      code=code, limit=limit, cursor=cursor)
    if as_csv and not as_json:
        _csv_out(records.PUBLIC, found["data"])
        return
    rows = found["data"]
    t = table(f"{len(rows)} requests from {found['from']} to {found['to']}"
              + (f" (capped: {found['searched']} records searched)" if found["capped"] else ""),
              ["time", "request id", "account", "key", "model", "status", "code", "cost", "ms"],
              [[x["time"], x["request_id"], x["account_id"], x["key_id"], x["model"], x["status"], x["code"],
                x["cost_toman"], x["duration_ms"]] for x in rows])
    for column in t.columns:
        column.overflow = "fold"
    emit(found, table=t, message=f"next page: --cursor {found['next_cursor']}" if found["next_cursor"] else None)
