"""The receipt of a paid top-up (CUSTOMERS.md "The first five minutes"): the document an Iranian
company files for its books. The amount paid (and credited) includes the tax, so with
UPGATE_VAT_PERCENT = rate:

    net = paid × 100 / (100 + rate), rounded down to the toman;   VAT = paid − net

in integers (the rate in hundredths of a percent), so no rounding of a binary float ever
reaches a receipt. Only a paid order has one: any other order, and another account's, is
`orders.UnknownOrder` (the dashboard's 404, the same as one that does not exist).
"""
from __future__ import annotations

from decimal import Decimal

from upgate.billing import money
from upgate.payments import orders


def vat_split(paid_micro: int, percent: str) -> tuple[int, int]:
    """(net, VAT) in micro-toman of an amount that includes VAT at `percent` ("10", "9.5");
    net is whole toman, rounded down; net + VAT == paid."""
    hundredths = int(Decimal(percent) * 100)
    net_toman = (paid_micro * 10_000) // ((10_000 + hundredths) * money.MICRO)
    net = net_toman * money.MICRO
    return net, paid_micro - net


def receipt(client, settings, order_id: str, account_id: str) -> dict:
    """What the receipt page prints, for the signed-in account's paid order."""
    order = orders.get(client, order_id, account_id)
    if order["status"] != "paid":
        raise orders.UnknownOrder(f"no receipt for order {order_id}: it is {order['status']}")
    paid = order["_amount"]
    vat = None
    if settings.vat_percent:
        net, tax = vat_split(paid, settings.vat_percent)
        vat = {"percent": settings.vat_percent, "net_micro": net, "vat_micro": tax, "tax_id": settings.tax_id}
    return {"order": orders.public(order), "paid_micro": paid, "vat": vat,
            "business_name": settings.business_name, "business_address": settings.business_address}
