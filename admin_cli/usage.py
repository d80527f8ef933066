"""`upgate-admin usage`: an account's settled usage for a Jalali month, grouped by key, model
or day — the same report as GET /v1/svc/usage, from the same daily aggregates."""
from __future__ import annotations

import click

from admin_cli.account import refusals
from admin_cli.output import Refused, emit, json_option, table
from upgate.billing import jalali
from upgate.services import accounts, usage as usage_report


@click.command()
@click.argument("account_id")
@click.option("--group-by", type=click.Choice(["key", "model", "day"]), default="key", show_default=True)
@click.option("--month", default=None, help="Jalali month YYYY-MM (default: the current Tehran month).")
@json_option
def usage(account_id: str, group_by: str, month: str | None, as_json: bool) -> None:
    """Show what an account spent: requests, tokens and cost per key, model or day.

    \b
    Example:
      upgate-admin usage 6f1c…-…-… --group-by model --month 1405-09
    """
    from admin_cli.main import redis_client

    month = month or jalali.month_key()
    try:
        first, last = jalali.parse_month(month)
    except ValueError as e:
        raise Refused(str(e)) from None
    client = redis_client()
    with refusals():
        account_id = accounts.require_account(client, account_id)
    days = jalali.days(first, last)
    report = usage_report.account_report(client, account_id, days, group_by)  # the API's report
    result = {**report, "month": month}
    label = usage_report.GROUPS[group_by]
    rows = [[r[label], r["requests"], r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"],
             r["cost_toman"]] for r in report["rows"]]
    t = report["totals"]
    rows.append(["total", t["requests"], t["prompt_tokens"], t["cached_tokens"], t["completion_tokens"],
                 t["cost_toman"]])
    emit(result, table=table(f"Usage of {account_id} in {month} by {group_by}",
                             [label, "requests", "prompt tokens", "cached tokens", "completion tokens",
                              "cost (toman)"], rows))
