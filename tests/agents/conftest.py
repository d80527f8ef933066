"""A gateway node serving the demo's own catalog (upgate/demo_catalog.toml: its alias patterns are
what an agent's default model names resolve by) on the mock provider, both dialects, with the
Responses API on; and the real agent CLIs, installed from npm at their pinned versions
(tests/agents/npm_clients.py). Skipped only where node itself is not installed."""
from __future__ import annotations

import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import httpx
import pytest

from tests.agents import npm_clients
from tests.gateway import Node, seed, test_settings
from tests.handlers.test_proxy import wallet
from upgate.billing import money
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.services import records
from upgate.store import connection as store

needs_node = pytest.mark.skipif(not shutil.which("node") or not shutil.which("npm"),
                                reason="node and npm are not installed")


@pytest.fixture(scope="session")
def npm_prefix() -> Path:
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are not installed")
    return npm_clients.install()


@pytest.fixture
def demo_node(redis_url, mock):
    text = resources.files("upgate").joinpath("demo_catalog.toml").read_text(encoding="utf-8")
    catalog_store.store(store.connect_sync(redis_url), catalog.parse(text, {"mock", "mock-anthropic"}))
    providers = {"mock": mock.provider("mock"), "mock-anthropic": mock.provider("mock-anthropic", dialect="anthropic")}
    node = Node(test_settings(redis_url, responses=True), providers)
    yield node
    node.close()


@pytest.fixture
def account(redis_url):
    """(key, account id) with 100,000 toman, as the demo's."""
    key, account_id, _ = seed(redis_url, balance="100000")
    return key, account_id


def configure(mock, **switches) -> None:
    httpx.post(f"http://127.0.0.1:{mock.port}/_mock/config", json=switches).raise_for_status()


def settled(redis_url: str, account_id: str, before: dict) -> tuple[int, list[dict]]:
    """(what the wallet lost, the account's request records since `before`): the wallet must
    move by exactly what the records say was charged, and no hold stay open."""
    after = wallet(redis_url, account_id)
    assert after["held"] == 0
    recs = records.list_requests(store.connect_sync(redis_url), account_id, limit=100)
    return before["balance"] - after["balance"], recs


def cost_micro(recs: list[dict]) -> int:
    return sum(money.parse_toman(r["cost_toman"]) for r in recs)


def agent_env(home: Path, **extra) -> dict:
    """A private HOME and nothing of the user's own agent settings or keys."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE_", "CODEX_"))}
    env.update(HOME=str(home), DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1", NO_COLOR="1")
    env.update(extra)
    return env


def run(cmd: list[str], env: dict, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
