"""GET /v1/svc/me: the key's account state, read fresh from the store (not the auth cache)."""
from __future__ import annotations

from upgate.billing import jalali, money
from upgate.services import accounts
from upgate.errors import GatewayError
from upgate.handlers.base import BaseHandler


class MeHandler(BaseHandler):
    needs_key = True

    async def get(self) -> None:
        ctx = self.ctx
        key = self.key  # (checked in prepare; the access log names it and its account)
        acct = key.account_id
        month = jalali.month_key(ctx.ledger.now())  # the store's clock, as admit and settle use it
        view = await accounts.key_view(ctx.redis, acct, key.key_id, month)
        if view is None:
            raise GatewayError("invalid_api_key")
        self.set_rate(await ctx.ledger.rate_peek(acct, key.key_id))
        k = view["key"]
        limit = k["monthly_limit_micro"]
        updated = ctx.catalog.prices_updated_at
        self.write_json({
            "user": {"id": acct, "phone_masked": view["phone_masked"]},
            "key": {
                "name": k["name"],
                "prefix": k["prefix"],
                "monthly_limit_toman": money.fmt(limit) if limit is not None else None,
                "spent_this_month_toman": money.fmt(k["spent_micro"]),
                "rate_limit_rpm": k["rpm"],
                "allowed_models": k["allowed_models"],
            },
            "wallet": {
                "balance_toman": money.fmt(view["balance_micro"]),
                "held_toman": money.fmt(view["held_micro"]),
                "available_toman": money.fmt(view["available_micro"]),
            },
            "prices_updated_at": jalali.utc_iso(updated) if updated else None,
        })
