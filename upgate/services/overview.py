"""The overview over every account, per Jalali day: requests, charges and top-ups. One function
that GET /admin/v1/overview and the console's overview page both call, so the charts show the
API's numbers.

Requests and charges come from each account's daily usage hashes (usage.overview); top-ups from
each account's transaction log. Both read the accounts in batches, one pipelined round trip per
batch: nothing is aggregated on the client path, so the cost is paid here (N accounts × D days
HMGETs, plus one LRANGE per account), and a node reuses an answer for CACHE_S.
"""
from __future__ import annotations

from upgate.billing import jalali, money
from upgate.services import transactions, usage
from upgate.store import connection as store, keyspace

CACHE_S = 30.0  # an overview reads every account: a dashboard refresh reuses it
_TOPUP_KINDS = ("topup", "opening")


def topups(client, days: list[str], batch: int = 500) -> dict[str, int]:
    """Σ top-ups in micro-toman per Tehran day (opening balances included; a migration's opening
    is not: it is money received long before, see transactions.is_migration)."""
    out = dict.fromkeys(days, 0)
    start_ms = transactions.month_bounds_ms(days[0][:7])[0]
    ids = [store.text(a) for a in client.sscan_iter(keyspace.ACCOUNTS, count=1000)]
    for first in range(0, len(ids), batch):
        chunk = ids[first:first + batch]
        pipe = client.pipeline(transaction=False)
        for acct in chunk:
            pipe.lrange(keyspace.transactions(acct), 0, -1)
        for acct, raws in zip(chunk, pipe.execute()):
            for raw in raws:
                ms, kind = store.text(raw).split("|", 2)[:2]
                if kind not in _TOPUP_KINDS or int(ms) < start_ms:
                    continue  # the cheap test first: most records are neither
                txn = transactions.decode(acct, raw)
                day = jalali.day_key(txn["_ms"] / 1000)
                if day in out and not transactions.is_migration(txn):
                    out[day] += txn["_micro"]
    return out


def overview(client, days: list[str]) -> dict:
    """GET /admin/v1/overview's body for the Jalali days `days` (in order)."""
    counts = usage.overview(client, days)
    paid = topups(client, days)
    rows = [{"day": d, "requests": counts[d]["requests"], "charges_toman": money.fmt(counts[d]["charges"]),
             "topups_toman": money.fmt(paid[d])} for d in days]
    totals = {"requests": sum(counts[d]["requests"] for d in days),
              "charges_toman": money.fmt(sum(counts[d]["charges"] for d in days)),
              "topups_toman": money.fmt(sum(paid.values()))}
    return {"from": days[0], "to": days[-1], "days": rows, "totals": totals}
