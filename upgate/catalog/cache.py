"""The catalog every gateway node keeps in memory (asyncio), reloaded when it changes.

A node holds one immutable snapshot read in one Lua call (records and version together) and
swapped in by a single assignment, so a request never sees half of one catalog and half of
another. It reloads on the pub/sub event ``{"t": "catalog"}`` and, in case a message was
missed, on a version poll. Decoding and indexing a version (JSON per model, rendered bodies)
runs on a worker thread, never the event loop: 40,000 models took ~3 s of Python, during
which the node answered no one. What the snapshot holds is ``upgate.catalog.rules``'s; how it is stored
is ``upgate.catalog.store``'s.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import orjson

from upgate.store import keyspace
from upgate.store.background import stop_if_cancelled
from upgate.catalog import aliases as alias_rules
from upgate.catalog.rules import Model, model_record, not_found, valid_id
from upgate.catalog.store import READ, decode_snapshot, syncs
from upgate.errors import GatewayError
from upgate.store.connection import text

log = logging.getLogger("upgate.catalog.rules")
_BUILDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="upgate-catalog")


class _Snapshot:
    """One catalog version, complete, never mutated: what a node serves between swaps."""

    def __init__(self, version: str, prices_updated_at: float | None, models: list[Model],
                 syncs: dict[str, dict] | None = None):
        self.version = version
        self.prices_updated_at = prices_updated_at
        created = int(prices_updated_at or 0)
        self.all = {m.id: m for m in models}
        # provider → (usd_toman, markup) of its last price sync: bill_by = "provider_cost"
        self.cost_rates = {}
        for provider, rec in (syncs or {}).items():
            try:
                self.cost_rates[provider] = (Decimal(rec["usd_toman"]), Decimal(rec["markup"]))
            except (KeyError, TypeError, ArithmeticError):
                log.warning("catalog: unreadable price-sync record for provider %s", provider)
        self.visible = [m for m in models if not m.hidden]
        self.by_id = {m.id: m for m in self.visible}
        self.by_alias = {a: m for m in self.visible for a in m.aliases if not alias_rules.is_pattern(a)}
        self.patterns = alias_rules.Patterns([(a, m) for m in self.visible for a in m.aliases
                                              if alias_rules.is_pattern(a)])
        # rendered once per version: the models endpoints never re-render per request
        records = [model_record(m, created) for m in self.visible]
        self.list_body = orjson.dumps({"object": "list", "data": records})
        self.record_bodies = {r["id"]: orjson.dumps(r) for r in records}
        paid_chat = [m for m in self.visible if not m.free and "chat" in m.capabilities]
        self.cheapest_paid_chat = min(
            paid_chat, default=None,
            key=lambda m: (m.completion_toman_per_million, m.prompt_toman_per_million,
                           m.request_toman, m.id))


def _build(raw) -> _Snapshot | None:
    """The snapshot of one READ answer (on the builder thread); None when the store holds none."""
    meta, models = decode_snapshot(raw)
    version = meta.get("version")
    if version is None or not models:
        return None
    updated = meta.get("prices_updated_at")
    return _Snapshot(version, float(updated) if updated else None, models, syncs(meta))


class Catalog:
    """The catalog as one gateway node sees it (asyncio). Swaps happen by one assignment."""

    def __init__(self, client):
        self.client = client
        self._snap: _Snapshot | None = None
        self._task: asyncio.Task | None = None
        self._again = False

    # state
    @property
    def loaded(self) -> bool:
        return self._snap is not None

    @property
    def version(self) -> str | None:
        return self._snap.version if self._snap else None

    @property
    def prices_updated_at(self) -> float | None:
        return self._snap.prices_updated_at if self._snap else None

    # loading
    async def reload(self) -> None:
        """Read the whole catalog in one atomic step and swap it in at once. A store without a
        catalog leaves the current one in force. Redis errors propagate to the caller."""
        raw = await self.client.eval(READ, 2, keyspace.CATALOG_META, keyspace.CATALOG)
        snap = await asyncio.get_running_loop().run_in_executor(_BUILDER, _build, raw)
        if snap is None:
            if self._snap is not None:
                log.warning("the store holds no catalog; keeping version %s", self._snap.version)
            return
        if self._snap is not None and snap.version == self._snap.version:
            return  # a poll and an event both read it while the other was building: in force once
        self._snap = snap
        log.info("catalog version %s in force: %d models", snap.version, len(snap.all))

    def on_event(self, msg: dict) -> asyncio.Task | None:
        """A pub/sub message: `{"t": "catalog"}` schedules a reload; other types are ignored.
        Reloads coalesce: while one runs, further events make it run once more."""
        if not isinstance(msg, dict) or msg.get("t") != "catalog":
            return None
        if self._task is not None and not self._task.done():
            self._again = True
            return self._task
        self._task = asyncio.get_running_loop().create_task(self._reload_soon())
        return self._task

    async def _reload_soon(self) -> None:
        while True:
            self._again = False
            try:
                await self.reload()
            except Exception as e:  # the poll loop is the backstop
                log.warning("catalog reload failed (%s); will retry on the next poll", type(e).__name__)
                return
            if not self._again:
                return

    async def poll(self, interval_s: float) -> None:
        """Belt and braces: every `interval_s`, one HGET of the version; reload when it moved
        (a pub/sub message missed while the subscription was down)."""
        while True:
            await asyncio.sleep(interval_s)
            stop_if_cancelled()
            try:
                remote = await self.client.hget(keyspace.CATALOG_META, "version")
                if remote is not None and text(remote) != self.version:
                    await self.on_event({"t": "catalog"})  # coalesced with an event's reload
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("catalog version poll failed (%s)", type(e).__name__)

    # lookups
    def _require(self) -> _Snapshot:
        snap = self._snap
        if snap is None:
            raise GatewayError("pricing_unavailable")
        return snap

    def _lookup(self, model_id: str) -> tuple[_Snapshot, Model]:
        snap = self._snap
        if snap is not None and snap.by_alias and model_id in snap.by_alias:
            return snap, snap.by_alias[model_id]  # an agent's name for a catalog model
        model = None
        if valid_id(model_id):
            snap = self._require()
            model = snap.by_id.get(model_id)
        if model is None and snap is not None and snap.patterns:
            model = snap.patterns.match(model_id)  # a release's new name: `claude-opus-*`
        if model is None:
            if valid_id(model_id):
                raise not_found(model_id)
            raise not_found(str(model_id))
        return snap, model

    def resolve(self, model_id: str) -> Model:
        """The visible model for `model_id`: 404 model_not_found for a malformed id (even
        before any catalog), 503 pricing_unavailable before any catalog, 404 for an unknown
        or hidden id."""
        return self._lookup(model_id)[1]

    def get(self, model_id: str) -> Model | None:
        """Any model of the catalog in force, hidden ones included (None when absent)."""
        snap = self._snap
        return snap.all.get(model_id) if snap else None

    def cost_rate(self, provider: str) -> tuple[Decimal, Decimal] | None:
        """(usd_toman, markup) the provider's last `models sync` recorded, or None."""
        snap = self._snap
        return snap.cost_rates.get(provider) if snap else None

    def visible(self) -> list[Model]:
        snap = self._snap
        return list(snap.visible) if snap else []

    def alternative_for(self, free_model: Model) -> Model | None:
        """A visible paid model to suggest with free_quota_exceeded: the same id without
        ":free" when it exists, else the cheapest visible paid chat model."""
        snap = self._snap
        if snap is None:
            return None
        if free_model.id.endswith(":free"):
            same = snap.by_id.get(free_model.id[: -len(":free")])
            if same is not None and not same.free:
                return same
        return snap.cheapest_paid_chat

    def list_json(self) -> bytes:
        """The GET /v1/models body, rendered once per catalog version."""
        return self._require().list_body

    def record_json(self, model_id: str) -> bytes:
        """The GET /v1/models/{id} body (same resolution rules as `resolve`)."""
        snap, model = self._lookup(model_id)
        return snap.record_bodies[model.id]
