"""/admin/v1/payments: top-up orders (`upgate-admin payments list|show|verify`, all from
upgate/payments/). Verify asks the order's gateway now and credits it when paid, exactly once
however often it is called."""
from __future__ import annotations

from upgate.handlers.admin.base import AdminHandler
from upgate.handlers.admin.spec import Op, nullable, obj, ref
from upgate.payments import orders, service

_OUTCOMES = ["paid", "already_paid", "not_paid", "amount_mismatch", "unavailable", "refused", "off", "conflict"]


def _list(client, account, status, cursor, limit):
    return orders.list_orders(client, account_id=account, status=status, cursor=cursor, limit=limit)


def _show(client, order_id):
    return orders.public(orders.get(client, order_id))


class PaymentsHandler(AdminHandler):
    PATH = "/admin/v1/payments"
    OPS = {"get": Op("Top-up orders, newest first; only one account's with ?account=, one status with "
                     "?status=; the next page with ?cursor=<next_cursor>.",
                     obj({"data": {"type": "array", "items": ref("Order")}, "next_cursor": nullable({"type": "string"})}),
                     query={"account": {"type": "string", "format": "uuid"},
                            "status": {"enum": list(orders.STATUSES)}, "cursor": {"type": "string"},
                            "limit": {"type": "integer", "minimum": 1, "maximum": 200}})}

    async def get(self) -> None:
        q = self.get_query_argument
        self.write_json(await self.call(_list, q("account", None), q("status", None), q("cursor", None),
                                        self.int_query("limit", 50, 1, 200)))


class PaymentHandler(AdminHandler):
    PATH = "/admin/v1/payments/{id}"
    OPS = {"get": Op("One top-up order.", ref("Order"))}

    async def get(self, order_id: str) -> None:
        self.write_json(await self.call(_show, order_id))


class PaymentVerifyHandler(AdminHandler):
    PATH = "/admin/v1/payments/{id}/verify"
    OPS = {"post": Op("Ask the order's gateway now, with the order's amount, whether it was paid, and credit "
                      "it when so (exactly once: a paid order answers already_paid). A gateway that does not "
                      "answer leaves the order as it is (outcome unavailable).",
                      obj({"order": ref("Order"), "outcome": {"enum": _OUTCOMES}}))}

    async def post(self, order_id: str) -> None:
        result = await self.call(service.verify_id, self.ctx.settings, order_id)
        self.ctx.metrics.count_payment(result["order"]["gateway"], result["outcome"])
        self.write_json(result)


HANDLERS = [PaymentsHandler, PaymentHandler, PaymentVerifyHandler]
