"""The reconciliation loop on running nodes: a payment whose customer never came back is
credited by the loop within its period, once, with two nodes running it; the outcome is counted
in /metrics per gateway."""
from __future__ import annotations

import time

import httpx

from tests.payments.conftest import balance, new_account, pay_settings, payment_topups
from upgate.payments import orders, service


def test_two_nodes_reconcile_a_never_called_back_payment_once(make_node, redis_url, client, zarinpal):
    opts = dict(payments="zarinpal", zarinpal_merchant_id=zarinpal.merchant, zarinpal_url=zarinpal.url,
                payments_reconcile_s=0.3)
    acct = new_account(client)
    order, _ = service.start(client, pay_settings(redis_url, "zarinpal", zarinpal=zarinpal), acct, "40000")
    nodes = [make_node(**opts), make_node(**opts)]
    zarinpal.pay(order["authority"])  # and the tab is closed: no callback ever
    deadline = time.monotonic() + 20
    while orders.get(client, order["id"])["status"] != "paid" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert orders.get(client, order["id"])["status"] == "paid"
    time.sleep(1.0)  # more ticks on both nodes: nothing more happens
    assert balance(client, acct) == "40000.000000" and len(payment_topups(client, acct)) == 1
    verifies = zarinpal.verify_calls()
    assert verifies <= 3  # the lease: one node a tick, and a paid order leaves the to-do list
    scraped = ""
    for _ in range(30):
        scraped = "".join(httpx.get(n.url + "/metrics").text for n in nodes)
        if 'upgate_payments_total{gateway="zarinpal",outcome="paid"} 1.0' in scraped:
            break
        time.sleep(0.2)
    assert 'upgate_payments_total{gateway="zarinpal",outcome="paid"} 1.0' in scraped
