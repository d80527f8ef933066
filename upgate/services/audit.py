"""The audit: does every account's balance equal everything ever recorded for it?

For each account, balance == credited − charged, where `credited` (Σ transactions) is kept by
lua/credit.lua and `charged` (Σ charges) by lua/settle.lua, each in the same atomic step as the
balance change. A balance changed any other way (a stray HINCRBY, a restored backup of one key,
a bug) breaks the equation and is named here. `deep=True` also checks credited == Σ of the
transaction log (a log edited or lost behind the scripts' back).

The audit only reads. Cost: the account set is read with SSCAN, BATCH accounts at a time, and
each batch's wallets with one pipeline of HMGETs (one round trip per batch; on a Redis Cluster
redis-py sends each node its part at once). An account from before transactions were recorded
(no `credited`) cannot be judged: it is counted in `unmigrated` (`upgate-admin migrate` gives it
its opening transaction). Mismatches are read again in one consistent snapshot
(lua/statement.lua) before they are reported, so a top-up or a charge landing between two reads
is never reported. Measured numbers: docs/money.md.
"""
from __future__ import annotations

from upgate.billing import money
from upgate.services import phone_index
from upgate.store import connection as store, keyspace

BATCH = 1000


def _read(client, ids: list[str], deep: bool) -> list:
    pipe = client.pipeline(transaction=False)
    for acct in ids:
        pipe.hmget(keyspace.wallet(acct), "balance", "credited", "charged")
        if deep:
            pipe.lrange(keyspace.transactions(acct), 0, -1)
    replies = pipe.execute()
    step = 2 if deep else 1
    return [replies[i:i + step] for i in range(0, len(replies), step)]


def _expected(w, log, deep: bool) -> tuple[int, int] | None:
    """(balance, expected) of one account's read, None when it has no wallet."""
    balance, credited, charged = w
    if balance is None:
        return None
    balance, credited, charged = int(balance), int(credited), int(charged or 0)
    expected = credited - charged
    if deep and expected == balance:
        logged = sum(int(store.text(r).split("|", 3)[2]) for r in log)
        if logged != credited:  # the log does not add up to the counter: report what it says
            expected = logged - charged
    return balance, expected


def _check(client, ids: list[str], deep: bool) -> tuple[list[dict], int]:
    """(the mismatches among `ids`, how many of them are from before transactions)."""
    reads = _read(client, ids, deep)
    unmigrated = sum(1 for r in reads if r[0][0] is not None and r[0][1] is None)
    suspects = []
    for acct, r in zip(ids, reads):
        if r[0][1] is None:  # no wallet, or not migrated: nothing to judge it by
            continue
        got = _expected(r[0], r[1] if deep else (), deep)
        if got is not None and got[0] != got[1]:
            suspects.append(acct)
    out = []
    for acct in suspects:  # confirm from one consistent snapshot
        snap = store.script("statement").call_sync(
            client, [keyspace.wallet(acct), keyspace.transactions(acct)], [keyspace.usage(acct, "")])
        if int(snap[0]) == 0 or snap[2] in (None, b"", ""):
            continue
        got = _expected((snap[1], snap[2], snap[3]), snap[4], deep)
        if got is not None and got[0] != got[1]:
            out.append({"account_id": acct, "balance_toman": money.fmt(got[0]),
                        "expected_toman": money.fmt(got[1])})
    return out, unmigrated


def run(client, *, deep: bool = False, batch: int = BATCH) -> dict:
    """Check every account, writing nothing: {"accounts": N, "mismatches": [{account_id,
    balance_toman, expected_toman}], "duplicate_phones": [{phone, account_ids}] (phones several
    accounts hold), "payment_mismatches": [{account_id, order_id, ref, problem}]
    (upgate/payments/audit.py), "unmigrated": N (accounts `upgate-admin migrate` has not yet
    brought to this release's form: not judged)}."""
    from upgate.payments import audit as payments_audit

    count, unmigrated, mismatches, every, payments = 0, 0, [], [], []
    ids: list[str] = []

    def check(ids: list[str]) -> None:
        nonlocal count, unmigrated, mismatches, payments
        bad, old = _check(client, ids, deep)
        mismatches += bad
        unmigrated += old
        payments += payments_audit.check(client, ids)
        count += len(ids)
        every.extend(ids)

    for raw in client.sscan_iter(keyspace.ACCOUNTS, count=batch):
        ids.append(store.text(raw))
        if len(ids) >= batch:
            check(ids)
            ids = []
    if ids:
        check(ids)
    mismatches.sort(key=lambda m: m["account_id"])
    return {"accounts": count, "mismatches": mismatches, "duplicate_phones": phone_index.duplicates(client, every),
            "payment_mismatches": payments, "unmigrated": unmigrated}
