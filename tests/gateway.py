"""Run real gateway nodes and the mock provider inside the test process, each on its own
event-loop thread, talking real HTTP on loopback ports."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tests.procs import free_port
from upgate.billing import money
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.services import accounts, keys
from upgate.store import connection as store
from upgate.settings import Settings
from upgate.upstream.providers import Provider

PEPPER = "test-pepper"
CATALOG = Path(__file__).with_name("catalog.toml")


class LoopThread:
    """An asyncio loop on a daemon thread; `run(coro)` executes on it and returns the result."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class MockProvider:
    def __init__(self):
        from upgate.mock import upstream as mock_upstream

        self.port = free_port()
        self.thread = LoopThread("mock-upstream")
        self.thread.run(mock_upstream.serve(self.port))
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def provider(self, name: str = "mock", dialect: str = "openai") -> Provider:
        return Provider(name=name, base_url=self.base_url, api_key="sk-mock-SECRET123",
                        dialect=dialect, available=True)

    def close(self) -> None:
        self.thread.close()


class Node:
    """One gateway node (what `upgate serve` runs), on its own loop thread."""

    def __init__(self, settings: Settings, providers: dict):
        from upgate.server import bind, start_node

        self.settings = settings
        self.port = free_port()
        self.thread = LoopThread(f"gateway-{self.port}")

        async def start():
            return await start_node(settings, providers, bind(self.port, "127.0.0.1"))

        self.ctx, self.server = self.thread.run(start())
        self.thread.run(asyncio.wait_for(self.ctx.subscribed.wait(), 10))
        self.url = f"http://127.0.0.1:{self.port}"
        self.base = self.url + "/v1"

    def drain(self, grace_s: float = 0.0) -> None:
        from upgate.server import drain

        self.thread.run(drain(self.ctx, self.server, grace_s), timeout=60)

    def close(self) -> None:
        try:
            self.drain(0.0)
        finally:
            self.thread.close()


def fresh_phone() -> str:
    """A mobile number no other test account has (a phone belongs to one account)."""
    import secrets

    return "0912" + "".join(secrets.choice("0123456789") for _ in range(7))


def seed(redis_url: str, *, balance: str = "1000", phone: str | None = None, **key_opts):
    """A funded account and one key: returns (full key, account id, key id)."""
    client = store.connect_sync(redis_url)
    account_id = accounts.create_account(client, phone or fresh_phone(), money.parse_toman(balance))
    key, key_id, _ = keys.create_key(client, PEPPER, account_id, **key_opts)
    return key, account_id, key_id


def load_catalog(redis_url: str) -> None:
    client = store.connect_sync(redis_url)
    catalog_store.store(client, catalog.parse(CATALOG.read_text(), {"mock", "dead"}))


def test_settings(redis_url: str, **overrides) -> Settings:
    """Settings of a test node; /metrics is open unless a test says otherwise."""
    return Settings(redis_url=redis_url, key_pepper=PEPPER, **{"metrics_public": True, **overrides})
