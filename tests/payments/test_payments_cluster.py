"""Payments on a Redis Cluster: the order and the wallet share the account's slot, so the one
credit step marks the order paid there; the lookups, listings and the reconciler's to-do list
live in their own slots and are read across them."""
from __future__ import annotations

from tests.payments.conftest import pay_settings
from upgate.billing import money
from upgate.payments import gateways, orders, service
from upgate.services import accounts, audit
from upgate.store import connection as store


def test_an_order_paid_and_credited_once_on_a_cluster(cluster_url):
    client = store.connect_sync(cluster_url)
    s = pay_settings(cluster_url, "fake")
    accts = [accounts.create_account(client, f"0912000000{i}", money.parse_toman("0")) for i in range(3)]
    made = [service.start(client, s, a, "10000")[0] for a in accts]
    bank = gateways.build(s, client)
    for o in made[:2]:
        bank.decide(o["authority"], True)
    assert service.callback(client, s, {"Authority": made[0]["authority"], "Status": "OK"}).outcome == "paid"
    assert service.reconcile(client, s) == {"paid": 1, "not_paid": 1}  # the first was closed by its callback
    statuses = {o["id"]: o["status"] for o in orders.list_orders(client, limit=10)["data"]}
    assert statuses == {made[0]["id"]: "paid", made[1]["id"]: "paid", made[2]["id"]: "pending"}
    result = audit.run(client)
    assert result["mismatches"] == [] and result["payment_mismatches"] == []
