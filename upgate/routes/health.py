"""The shared health of routes and pooled keys, as one gateway node sees it (asyncio).

The truth is in Redis (lua/route_health.lua, one hash per model and per provider's pool), so
every node agrees; each node keeps a copy in memory, fed by the script's answers and by its
pub/sub events, and rebuilt from the store whenever the subscription (re)connects. Choosing a
route therefore costs no round trip. The store is written only when something failed, and once
more when a route that had failed answers again (its run of failures ends): a healthy request
keeps the hot path's two round trips (admit, settle).

Route health applies to models of two or more routes; a single-route model keeps the spec's
per-model cool-down (upgate/billing/cooldowns.py), exactly as before routes. A pooled key the
provider refused (401/403) is set aside on any model.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time

from upgate.catalog.route_rules import Route
from upgate.routes import choice
from upgate.store import connection as store, keyspace

log = logging.getLogger("upgate.routes")

FAILURE_MEMORY_MS = 600_000  # a run of failures is forgotten after 10 quiet minutes


class RouteHealth:
    def __init__(self, client, settings, rng: random.Random | None = None):
        self.client = client
        self.failures_needed = settings.route_failures
        self.cold_ms = int(settings.route_cooldown_s * 1000)
        self.rng = rng or random.Random()
        self._script = store.script("route_health")
        self._cold: dict[tuple[str, str], float] = {}  # (model, route id) → monotonic deadline
        self._failures: dict[tuple[str, str], int] = {}  # (model, route id) → failures in a row
        self._keys_out: dict[tuple[str, str], float] = {}  # (provider, key variable) → deadline
        self._tasks: set[asyncio.Task] = set()

    # ---- reading (no I/O)
    def cold_left(self, model_id: str, route: Route) -> float | None:
        """Seconds this route stays cold, or None."""
        deadline = self._cold.get((model_id, route.route_id))
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        return left if left > 0 else None

    def failures(self, model_id: str, route: Route) -> int:
        return self._failures.get((model_id, route.route_id), 0)

    def attempts(self, model, providers: dict) -> list[Route]:
        """The routes a request for `model` (of two or more routes) tries, in order. A route
        whose provider is disabled or whose whole key pool is set aside counts as cold."""
        def out(r: Route) -> bool:
            p = providers.get(r.provider)
            return (p is None or not p.available or self.cold_left(model.id, r) is not None
                    or (p.pooled and self._usable_key(p) is None))
        return choice.order(model.routes, out, self.rng)

    def model_cold(self, model) -> float | None:
        """For a model of two or more routes: seconds until its first route is warm again when
        every route is cold (the spec's cool-down, 429 upstream_rate_limited), else None."""
        waits = [self.cold_left(model.id, r) for r in model.routes]
        return None if any(w is None for w in waits) else min(waits)

    def key_out_left(self, provider: str, var: str) -> float | None:
        deadline = self._keys_out.get((provider, var))
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        return left if left > 0 else None

    def _usable_key(self, provider) -> tuple[str, str] | None:
        usable = [k for k in provider.keys if self.key_out_left(provider.name, k[0]) is None]
        return self.rng.choice(usable) if usable else None

    def pick_key(self, provider) -> tuple[str | None, str | None]:
        """(variable, key) for one attempt on a pooled provider: a random key not set aside;
        when all are, the one back soonest, so a single-route model is never worse off than
        with one key. (None, None) for a provider of one key."""
        if not provider.pooled:
            return None, None
        found = self._usable_key(provider)
        if found is None:
            found = min(provider.keys, key=lambda k: self.key_out_left(provider.name, k[0]) or 0)
        return found

    def has_usable_key(self, provider) -> bool:
        return provider.pooled and self._usable_key(provider) is not None

    # ---- writing (only when something failed, or a failed route answered again)
    async def _call(self, op: str, key: str, subject: str, member: str) -> tuple[int, int, int, int]:
        res = await self._script(self.client, (key,), (
            op, subject, member, self.failures_needed, self.cold_ms, keyspace.CHANNEL, 0, FAILURE_MEMORY_MS))
        return tuple(int(x) for x in res)

    async def failed(self, model_id: str, route: Route) -> bool:
        """One failure of `route` before its first byte; True when it made the route cold.
        A store error is logged, not raised: health is advice, the request goes on."""
        try:
            failures, until_ms, now_ms, made_cold = await self._call(
                "fail", keyspace.route_health(model_id), model_id, route.route_id)
        except Exception as e:  # noqa: BLE001 - any store failure: the next failure writes again
            log.warning("route health not recorded for %s via %s (%s)", model_id, route.route_id, type(e).__name__)
            return False
        self._apply("route", model_id, route.route_id, failures, until_ms, now_ms)
        if made_cold:
            log.warning("route %s of %s is cold for %.0f s after %d failures in a row", route.route_id,
                        model_id, self.cold_ms / 1000, self.failures_needed)
        return bool(made_cold)

    def succeeded(self, model_id: str, route: Route) -> None:
        """The route answered: end its run of failures, in the background and only when this
        node knows of one (so a healthy route never writes)."""
        if not self._failures.get((model_id, route.route_id)):
            return
        self._failures.pop((model_id, route.route_id), None)  # one reset per run, not one per request

        async def reset() -> None:
            try:
                await self._call("ok", keyspace.route_health(model_id), model_id, route.route_id)
            except Exception as e:  # noqa: BLE001
                log.warning("route health reset not recorded for %s (%s)", model_id, type(e).__name__)
        task = asyncio.get_running_loop().create_task(reset())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def refuse_key(self, provider: str, var: str) -> None:
        """The provider refused the pooled key in `var` (401/403): out of the pool for the
        cool-down, on every node. Logged by variable name, never the key."""
        log.warning("provider %s refused the key in %s: left out of its pool for %.0f s; check "
                    "that key", provider, var, self.cold_ms / 1000)
        self._keys_out[(provider, var)] = time.monotonic() + self.cold_ms / 1000  # at once, here
        try:
            _, until_ms, now_ms, _ = await self._call("refuse", keyspace.key_pool(provider), provider, var)
        except Exception as e:  # noqa: BLE001
            log.warning("refused key not shared with other nodes (%s)", type(e).__name__)
            return
        self._apply("key", provider, var, 0, until_ms, now_ms)

    # ---- the per-node copy
    def _apply(self, kind: str, subject: str, member: str, failures: int, until_ms: int, now_ms: int) -> None:
        k = (subject, member)
        if kind == "key":
            if until_ms > now_ms:
                self._keys_out[k] = time.monotonic() + (until_ms - now_ms) / 1000
            else:
                self._keys_out.pop(k, None)
            return
        if failures > 0:
            self._failures[k] = failures
        else:
            self._failures.pop(k, None)
        if until_ms > now_ms:
            self._cold[k] = time.monotonic() + (until_ms - now_ms) / 1000
        elif until_ms == 0:
            self._cold.pop(k, None)

    def on_event(self, msg: dict) -> None:
        """A pub/sub message from keyspace.CHANNEL (JSON-decoded); other types are ignored."""
        if not isinstance(msg, dict) or msg.get("t") != "route":
            return
        kind, subject, member = msg.get("kind"), msg.get("subject"), msg.get("member")
        try:
            failures, until_ms, now_ms = (int(msg.get(f, 0)) for f in ("failures", "until_ms", "now_ms"))
        except (TypeError, ValueError):
            return
        if kind in ("route", "key") and isinstance(subject, str) and isinstance(member, str):
            self._apply(kind, subject, member, failures, until_ms, now_ms)

    async def reload(self) -> None:
        """After a (re)subscription: rebuild the copy from the store."""
        cold: dict = {}
        failures: dict = {}
        keys_out: dict = {}
        found = []
        for prefix, suffix in (keyspace.ROUTE_HEALTH, keyspace.KEY_POOL):
            async for k in self.client.scan_iter(match=prefix + "*" + suffix, count=1000):
                k = store.text(k)
                found.append((k, k[len(prefix):-len(suffix)], prefix == keyspace.KEY_POOL[0]))
        if found:
            now_s, now_us = await self.client.time()
            now_ms = int(now_s) * 1000 + int(now_us) // 1000
            mono = time.monotonic()
            for key, subject, is_pool in found:
                for field, value in (await self.client.hgetall(key)).items():
                    member, _, what = store.text(field).rpartition(":")
                    n = int(value)
                    if what == "u" and n > now_ms:
                        (keys_out if is_pool else cold)[(subject, member)] = mono + (n - now_ms) / 1000
                    elif what == "f" and n > 0 and not is_pool:
                        failures[(subject, member)] = n
        self._cold, self._failures, self._keys_out = cold, failures, keys_out
