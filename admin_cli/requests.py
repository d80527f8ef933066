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
