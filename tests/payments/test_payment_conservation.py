"""Conservation with payments (hypothesis, a real redis-server, the loopback Zarinpal): any mix
of orders, payments (right and wrong amounts), cancellations, callbacks (true, forged, NOK,
replayed, from another account), verifies, reconciliation passes (before and after expiry),
the gateway going down, and operators' own top-ups. After every run:
- Σ paid orders = Σ `payment` top-ups, per account, one transaction per paid order;
- an order is paid exactly when the bank holds a payment of its amount for it;
- nothing else credits: balance = Σ transactions (no charges here), audit finds nothing."""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.payments.conftest import new_account, pay_settings
from upgate.payments import bounds, orders, service
from upgate.services import audit, transactions

AMOUNTS = (10_000, 25_000, 50_000)
op = st.one_of(
    st.tuples(st.just("start"), st.integers(0, 1), st.sampled_from(AMOUNTS)),
    st.tuples(st.just("pay"), st.integers(0, 9), st.booleans()),  # right amount / another amount
    st.tuples(st.just("cancel"), st.integers(0, 9)),
    st.tuples(st.just("callback"), st.integers(0, 9), st.booleans(), st.sampled_from((None, 0, 1))),
    st.tuples(st.just("verify"), st.integers(0, 9)),
    st.tuples(st.just("reconcile"), st.booleans()),  # after the expiry, or now
    st.tuples(st.just("down"), st.booleans()),
    st.tuples(st.just("operator_topup"), st.integers(0, 1), st.sampled_from((None, "r1"))),
)


@pytest.mark.filterwarnings("ignore")
@hsettings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(op, min_size=1, max_size=18))
def test_paid_orders_equal_payment_topups(redis_url, r, zarinpal, ops):
    r.flushall()
    zarinpal.payments.clear()
    zarinpal.down = False
    from upgate.store import connection as store

    client = store.connect_sync(redis_url)
    s = pay_settings(redis_url, "zarinpal", zarinpal=zarinpal, payments_timeout_s=1.0)
    accts = [new_account(client, "09121111111"), new_account(client, "09122222222")]
    made: list[dict] = []
    right: set[str] = set()  # authorities paid at the bank with the order's own amount
    for o in ops:
        kind, args = o[0], o[1:]
        pick = (lambda i: made[i % len(made)]) if made else None
        if kind == "start":
            if not zarinpal.down:
                asked = len(zarinpal.calls)
                try:
                    made.append(service.start(client, s, accts[args[0]], str(args[1]))[0])
                except bounds.TooManyPayments:  # 3 pending already (payments/bounds.py): nothing made or asked
                    assert len(zarinpal.calls) == asked
        elif kind == "pay" and made and zarinpal.payments[pick(args[0])["authority"]]["state"] == "pending":
            order = pick(args[0])
            amount = None if args[1] else 10 * int(Decimal(order["amount_toman"])) + 10
            zarinpal.pay(order["authority"], amount)
            if args[1]:
                right.add(order["authority"])
        elif kind == "cancel" and made and zarinpal.payments[pick(args[0])["authority"]]["state"] == "pending":
            zarinpal.cancel(pick(args[0])["authority"])
        elif kind == "callback" and made:
            who = None if args[2] is None else accts[args[2]]
            service.callback(client, s, {"Authority": pick(args[0])["authority"], "Status": "OK" if args[1] else "NOK"}, who)
        elif kind == "verify" and made:
            service.verify_id(client, s, pick(args[0])["id"])
        elif kind == "reconcile":
            service.reconcile(client, s, now_ms=(2**42 if args[0] else None))
            for order in made:  # the bank's own session ends with ours: a late payment is refused
                if orders.get(client, order["id"])["status"] == "expired" and \
                        zarinpal.payments[order["authority"]]["state"] == "pending":
                    zarinpal.cancel(order["authority"])
        elif kind == "down":
            zarinpal.down = args[0]
        elif kind == "operator_topup":
            transactions.topup(client, accts[args[0]], "1000", ref=args[1])
    zarinpal.down = False
    service.reconcile(client, s)  # whatever is still open and paid is found now
    for acct in accts:
        paid = [x for x in orders.list_orders(client, account_id=acct, limit=1000)["data"] if x["status"] == "paid"]
        txns = [t for t in transactions.list_transactions(client, acct) if t["actor"] == "payment"]
        assert sum(Decimal(x["amount_toman"]) for x in paid) == sum(Decimal(t["amount_toman"]) for t in txns)
        assert sorted(x["transaction_id"] for x in paid) == sorted(t["id"] for t in txns)
        everything = sum(Decimal(t["amount_toman"]) for t in transactions.list_transactions(client, acct))
        assert Decimal(client.hget(f"{{a:{acct}}}:wallet", "balance").decode()) == everything * 1_000_000
    for order in made:
        now = orders.get(client, order["id"])
        # (expiry closes only unpaid orders: a payment it finds made is credited, not expired)
        assert (now["status"] == "paid") == (order["authority"] in right), (now, order["authority"] in right)
    result = audit.run(client)
    assert result["mismatches"] == [] and result["payment_mismatches"] == []
    client.close()
