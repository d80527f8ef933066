"""What a node remembers of the refusals admit.lua gave, so that a key it refused is refused
again before its next body is parsed (docs/security.md): parsing a 20 MB body is the costliest
thing a request can make the event loop do, and a key that cannot be served must not get it.
Nothing here adds a round trip to a request that is served.

- Rate limited: admit.lua said when the key's window frees up (Retry-After). Until then its
  window stays full whatever any node does (requests are only ever added to it), so the node
  answers 429 by itself, exactly as admit would.
- Out of balance: a wallet can be topped up at any moment without an event, so the memory
  alone is not enough. A body over LARGE_BODY from an account this node saw short is checked
  against the wallet and the day's free counter (one round trip, only on that path) and
  refused with 402 while nothing is available and no free request is left today (admit serves
  a `:free` model from the free quota whatever the wallet holds, and the model is not known
  before the parse). Bodies under it are parsed as usual: their cost is small.

Any key or account event (an operator changed something) and every resubscription forgets all.
"""
from __future__ import annotations

import time

from upgate.billing import jalali, money
from upgate.store import connection as store, keyspace
from upgate.billing.ledger import RateInfo, Rejected

LARGE_BODY = 1 << 20  # bytes
SHORT_FOR_S = 600.0  # how long an account is remembered as short
_MAX_ENTRIES = 100_000  # a bound on memory; past it everything is forgotten


class Refusals:
    def __init__(self, topup_url: str, free_quota_default: int = 0) -> None:
        self._limited: dict[str, tuple[float, RateInfo]] = {}  # key id → (monotonic until, headers)
        self._short: dict[str, tuple[float, str]] = {}  # account id → (monotonic since, required)
        self._topup_url = topup_url
        self._free_default = free_quota_default  # a wallet without `free_quota` (as admit.lua)

    def note(self, key_id: str, account_id: str, err: Rejected) -> None:
        """Remember a refusal by admit.lua (called where the handler catches it)."""
        if len(self._limited) + len(self._short) > _MAX_ENTRIES:
            self.flush()
        if err.code == "rate_limit_exceeded" and err.retry_after and err.rate is not None:
            self._limited[key_id] = (time.monotonic() + err.retry_after, err.rate)
        elif err.code == "insufficient_balance":
            required = (err.svc or {}).get("required_toman", money.fmt(0))
            self._short[account_id] = (time.monotonic(), required)

    def check_rate(self, key_id: str) -> None:
        """Raise the 429 admit would give, while this key's window is known to be full."""
        entry = self._limited.get(key_id)
        if entry is None:
            return
        left = entry[0] - time.monotonic()
        if left <= 0:
            del self._limited[key_id]
            return
        rate = entry[1]
        raise Rejected("rate_limit_exceeded", rate=RateInfo(rate.limit, 0, rate.reset_s),
                       retry_after=max(1, int(left + 0.999)))

    async def check_balance(self, client, account_id: str, body_size: int, free_model: bool = False) -> None:
        """Raise 402 for a large body from an account known short that still has nothing
        available and, where the key may use a `:free` model of the route (`free_model`), no
        free request left today (one round trip, only then)."""
        if body_size <= LARGE_BODY:
            return
        entry = self._short.get(account_id)
        if entry is None:
            return
        if time.monotonic() - entry[0] > SHORT_FOR_S:
            del self._short[account_id]
            return
        pipe = client.pipeline(transaction=False)  # one slot: the account's
        pipe.hmget(keyspace.wallet(account_id), "balance", "held", "free_quota")
        pipe.get(keyspace.free(account_id, jalali.day_key(time.time())))
        (balance, held, quota), taken = await pipe.execute()
        balance, held, quota = int(balance or 0), int(held or 0), store.text(quota or "")
        if balance - held > 0:
            del self._short[account_id]  # topped up: parse, admit decides
            return
        if free_model and (int(quota) if quota else self._free_default) > int(taken or 0):
            return  # it may be a free request admit would serve: parse, admit decides
        raise Rejected("insufficient_balance", svc={
            "balance_toman": money.fmt(balance), "available_toman": money.fmt(balance - held),
            "required_toman": entry[1], "topup_url": self._topup_url})

    def on_event(self, msg: dict) -> None:
        if msg.get("t") in ("key", "account"):
            self.flush()

    def flush(self) -> None:
        self._limited.clear()
        self._short.clear()

