"""Payments: a customer tops up through a payment gateway (Zarinpal, Zibal, or the built-in
`fake`), and a paid order is credited exactly once.

- `orders.py`: the order (in the account's Redis slot) and its lookups;
- `gateways/`: one driver per gateway behind one small interface (request, pay_url, verify);
- `service.py`: start a payment, verify an order and credit it, the reconciliation pass;
- `reconciler.py`: the loop every node runs, one node at a time.

The callback proves nothing: an order is paid only when the server's own verify call, with the
order's amount from Redis, says so; the credit (lua/credit.lua, ref `<gateway>:<authority>`)
marks the order paid in the same atomic step. docs/payments.md.
"""
