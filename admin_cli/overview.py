"""`upgate-admin overview`: every account together, per Jalali day — requests, charges and
top-ups, the numbers of GET /admin/v1/overview and the console's overview charts."""
from __future__ import annotations

import click

from admin_cli.account import refusals
from admin_cli.output import emit, json_option, table
from upgate.services import overview as overview_, usage


@click.command()
@click.option("--from", "start", metavar="YYYY-MM-DD", help="First Jalali day (default: this month's first).")
@click.option("--to", "end", metavar="YYYY-MM-DD", help="Last Jalali day (default: this month's last).")
@json_option
def overview(start: str | None, end: str | None, as_json: bool) -> None:
    """Requests, charges and top-ups per Jalali day over every account (at most 366 days).
    Reads every account's days: about a second for 10,000 accounts and a month.

    \b
    Example:
      upgate-admin overview --from 1405-09-01 --to 1405-09-30 --json
    """
    from admin_cli.main import redis_client

    with refusals():
        days = usage.day_range(start, end)
    result = overview_.overview(redis_client(), days)
    rows = [[d["day"], d["requests"], d["charges_toman"], d["topups_toman"]] for d in result["days"]]
    t = result["totals"]
    rows.append(["total", t["requests"], t["charges_toman"], t["topups_toman"]])
    emit(result, table=table(f"overview {result['from']} … {result['to']}",
                             ["day", "requests", "charges (toman)", "top-ups (toman)"], rows))
