"""`upgate-admin audit`: every account's balance against everything recorded for it."""
from __future__ import annotations

import click

from admin_cli.output import Refused, emit, json_option, table, warn


@click.command()
@click.option("--deep", is_flag=True, help="Also add up every transaction log (slower).")
@json_option
def audit(deep: bool, as_json: bool) -> None:
    """Check that every account's balance equals its transactions minus its charges. Exit 1,
    naming the accounts, when any does not. Cheap enough to run hourly (see docs/money.md).

    \b
    Example:
      upgate-admin audit --json
    """
    from admin_cli.main import redis_client
    from upgate.services import audit as audit_

    result = audit_.run(redis_client(), deep=deep)
    bad = result["mismatches"]
    t = table(f"{result['accounts']} accounts audited, {len(bad)} mismatches",
              ["account id", "balance", "expected"],
              [[m["account_id"], m["balance_toman"], m["expected_toman"]] for m in bad])
    emit(result, table=t)
    for d in result["duplicate_phones"]:  # none of them signs in to the dashboard until resolved
        warn(f"phone {d['phone']} is shared by accounts {', '.join(d['account_ids'])}: give all but "
             "one another phone with `account set-phone`")
    if result["unmigrated"]:
        warn(f"{result['unmigrated']} accounts are from before transactions and were not judged: "
             "run `upgate-admin migrate`")
    for p in result["payment_mismatches"]:
        warn(f"account {p['account_id']}: {p['problem']} ({p['order_id'] or p['ref']})")
    if result["payment_mismatches"] and not bad:
        raise Refused(f"{len(result['payment_mismatches'])} payments do not match their orders")
    if bad:
        names = ", ".join(m["account_id"] for m in bad[:10]) + (" …" if len(bad) > 10 else "")
        raise Refused(f"{len(bad)} accounts do not add up: {names}")
