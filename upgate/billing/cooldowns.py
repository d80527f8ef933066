"""The Ledger's model cool-downs (a mixin of upgate.billing.ledger.Ledger): strikes and resets go to
lua/cooldown.lua (in the round trip of a settle or release where they can), and each node keeps
a local map of cold models, fed by the script's answers and by pub/sub, so skipping a cold
model costs no I/O.
"""
from __future__ import annotations

import time

from upgate.store import connection as store, keyspace

STRIKE_MEMORY_MS = 600_000  # a run of strikes is forgotten after 10 quiet minutes


class Cooldowns:
    """Uses the Ledger's client, settings, cooldown_ms and the _cooldown script."""

    def _cooldown_call(self, op: str, model: str, now_ms: int | None = None):
        return (self._cooldown, (keyspace.cooldown(model),),
                (op, model, self.settings.cooldown_strikes, self.cooldown_ms, keyspace.CHANNEL, now_ms or 0,
                 STRIKE_MEMORY_MS))

    def _cooldown_result(self, model: str, res) -> int | None:
        """Apply a cooldown.lua answer to the local map at once (the pub/sub echo follows)."""
        if res is None:
            return None
        strikes, until_ms, now_ms, made_cold = (int(x) for x in res)
        self._apply_cooldown(model, strikes, until_ms, now_ms)
        return until_ms if made_cold else None

    async def cooldown_strike(self, model: str, now_ms: int | None = None) -> int | None:
        """One upstream_rate_limited for `model`; returns until_ms (Redis clock) when this strike
        made the model cold, else None."""
        script, keys, args = self._cooldown_call("strike", model, now_ms)
        return self._cooldown_result(model, await script(self.client, keys, args))

    async def cooldown_reset(self, model: str) -> None:
        script, keys, args = self._cooldown_call("reset", model)
        self._cooldown_result(model, await script(self.client, keys, args))

    def _apply_cooldown(self, model: str, strikes: int, until_ms: int, now_ms: int) -> None:
        if strikes > 0:
            self._strikes[model] = strikes
        else:
            self._strikes.pop(model, None)
        if until_ms > now_ms:
            self._cold[model] = time.monotonic() + (until_ms - now_ms) / 1000
        elif until_ms == 0:
            self._cold.pop(model, None)

    def on_event(self, message: dict) -> None:
        """A pub/sub message from keyspace.CHANNEL (already JSON-decoded); others are ignored."""
        if not isinstance(message, dict) or message.get("t") != "cooldown":
            return
        model = message.get("model")
        try:
            strikes, until_ms, now_ms = (int(message.get(f, 0)) for f in ("strikes", "until_ms", "now_ms"))
        except (TypeError, ValueError):
            return
        if isinstance(model, str):
            self._apply_cooldown(model, strikes, until_ms, now_ms)

    def cold_until(self, model: str) -> float | None:
        """Seconds this model stays cold, or None when it is not cold (no I/O)."""
        deadline = self._cold.get(model)
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            self._cold.pop(model, None)
            return None
        return left

    def strikes(self, model: str) -> int:
        return self._strikes.get(model, 0)

    async def reload_cooldowns(self) -> None:
        """After a (re)subscription: rebuild the strike and cold maps from the store."""
        keys: list[str] = []
        async for k in self.client.scan_iter(match="{m:*}:cooldown", count=1000):
            keys.append(store.text(k))
        strikes: dict[str, int] = {}
        cold: dict[str, float] = {}
        if keys:
            now_s, now_us = await self.client.time()
            now_ms = int(now_s) * 1000 + int(now_us) // 1000
            pipe = self.client.pipeline(transaction=False)
            for k in keys:
                pipe.hmget(k, "strikes", "until_ms")
            mono = time.monotonic()
            for k, (s, u) in zip(keys, await pipe.execute()):
                model = k[len("{m:"):-len("}:cooldown")]
                if s is not None and int(s) > 0:
                    strikes[model] = int(s)
                if u is not None and int(u) > now_ms:
                    cold[model] = mono + (int(u) - now_ms) / 1000
        self._strikes, self._cold = strikes, cold
