"""GET /v1/svc/me: the key's account state, read fresh from the store (not the auth cache)."""
from __future__ import annotations

import orjson

from upgate import jalali, keyspace, money
from upgate.accounts import mask_phone
from upgate.errors import GatewayError
from upgate.handlers.base import BaseHandler


def _s(raw: dict) -> dict:
    return {k.decode(): v.decode() for k, v in raw.items()}


class MeHandler(BaseHandler):
    needs_key = True

    async def get(self) -> None:
        ctx = self.ctx
        key = self.key  # (checked in prepare; the access log names it and its account)
        acct = key.account_id
        pipe = ctx.redis.pipeline(transaction=False)
        pipe.hgetall(keyspace.wallet(acct))
        pipe.hgetall(keyspace.key_record(acct, key.key_id))
        wallet, record = (_s(x) for x in await pipe.execute())
        if not record or record.get("revoked") == "1":
            raise GatewayError("invalid_api_key")
        self.set_rate(await ctx.ledger.rate_peek(acct, key.key_id))
        balance = int(wallet.get("balance", 0))
        held = int(wallet.get("held", 0))
        limit = record.get("monthly_limit")
        allowed = record.get("allowed_models")
        updated = ctx.catalog.prices_updated_at
        month = jalali.month_key(ctx.ledger.now())  # the store's clock, as admit and settle use it
        self.write_json({
            "user": {"id": acct, "phone_masked": mask_phone(wallet.get("phone", ""))},
            "key": {
                "name": record.get("name"),
                "prefix": record.get("prefix"),
                "monthly_limit_toman": money.fmt(int(limit)) if limit else None,
                "spent_this_month_toman": money.fmt(int(record.get("spent:" + month, 0))),
                "rate_limit_rpm": int(record.get("rpm", 60)),
                "allowed_models": orjson.loads(allowed) if allowed else None,
            },
            "wallet": {
                "balance_toman": money.fmt(balance),
                "held_toman": money.fmt(held),
                "available_toman": money.fmt(balance - held),
            },
            "prices_updated_at": jalali.utc_iso(updated) if updated else None,
        })
