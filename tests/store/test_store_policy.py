"""A Redis that may evict keys can lose money: `upgate serve` and writing `upgate-admin` commands
refuse it, also where CONFIG is disabled; a store without persistence is warned about (issue 21
point 6). Real redis-servers started with the policies in question."""
from __future__ import annotations

import httpx
import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli
from tests.gateway import Node, load_catalog
from tests.gateway import test_settings as settings_for
from tests.procs import RedisServer, free_port
from upgate.store import connection as store, policy as store_policy
from upgate.cli import main as upgate_main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def lru():
    server = RedisServer(extra=["--maxmemory-policy", "allkeys-lru"]).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def lru_no_config():
    """A managed Redis as many providers run it: CONFIG renamed away."""
    server = RedisServer(extra=["--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", ""]).start()
    yield server
    server.close()


def _serve(url: str, tmp_path, **env):
    providers = tmp_path / "providers.toml"
    providers.write_text('[providers.mock]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')
    return CliRunner().invoke(upgate_main, ["serve", "--port", str(free_port()), "--host", "127.0.0.1"], env={
        "UPGATE_REDIS_URL": url, "UPGATE_KEY_PEPPER": "p", "UPGATE_PROVIDERS": str(providers),
        "UPGATE_ALLOW_EVICTION": None, "WEB_CONCURRENCY": None, **env})


def test_serve_refuses_an_evicting_redis_naming_the_policy_and_the_fix(lru, tmp_path):
    res = _serve(lru.url, tmp_path)
    assert res.exit_code == 1
    assert "allkeys-lru" in res.output and "noeviction" in res.output and "docs/redis.md" in res.output


def test_the_policy_is_read_from_info_where_config_is_disabled(lru_no_config, tmp_path):
    node = redis.Redis(port=lru_no_config.port)
    with pytest.raises(redis.ResponseError):
        node.config_get("maxmemory-policy")
    assert store_policy.eviction_policy(node) == "volatile-lru"
    res = _serve(lru_no_config.url, tmp_path)
    assert res.exit_code == 1 and "volatile-lru" in res.output


def test_the_override_is_for_tests_only_and_still_warns(lru):
    warnings = store_policy.check(store.connect_sync(lru.url), lru.url, env={"UPGATE_ALLOW_EVICTION": "1"})
    assert any("allkeys-lru" in w for w in warnings)
    with pytest.raises(store_policy.EvictingStore):
        store_policy.check(store.connect_sync(lru.url), lru.url, env={})


def test_writing_admin_commands_refuse_an_evicting_redis(lru, monkeypatch):
    monkeypatch.delenv("UPGATE_ALLOW_EVICTION", raising=False)
    runner = CliRunner()
    env = {"UPGATE_REDIS_URL": lru.url}
    res = runner.invoke(cli, ["account", "create", "--phone", "09121234567"], env=env)
    assert res.exit_code == 1 and "allkeys-lru" in res.output
    assert redis.Redis(port=lru.port).dbsize() == 0  # nothing written
    assert runner.invoke(cli, ["account", "list"], env=env).exit_code == 0  # reading is harmless


def test_a_noeviction_redis_is_accepted_by_the_admin_cli(redis_url):
    res = CliRunner().invoke(cli, ["account", "create", "--phone", "09121234567"], env={"UPGATE_REDIS_URL": redis_url})
    assert res.exit_code == 0, res.output


def test_healthz_warns_when_redis_does_not_persist(node):
    """The test Redis runs with neither AOF nor RDB (--save "" --appendonly no)."""
    body = httpx.get(node.url + "/healthz").json()
    assert body["status"] == "ok"
    assert any("neither AOF nor RDB" in w for w in body["warnings"])


def test_healthz_is_quiet_about_a_persistent_redis(mock):
    server = RedisServer(extra=["--appendonly", "yes", "--appendfsync", "everysec"]).start()
    try:
        load_catalog(server.url)
        node = Node(settings_for(server.url), {"mock": mock.provider()})
        try:
            assert httpx.get(node.url + "/healthz").json()["warnings"] == []
        finally:
            node.close()
    finally:
        server.close()


def test_a_node_reports_an_evicting_redis_it_reaches_later(lru, mock, monkeypatch):
    """A node started while the store did not answer checks it once it does."""
    monkeypatch.delenv("UPGATE_ALLOW_EVICTION", raising=False)
    load_catalog(lru.url)
    node = Node(settings_for(lru.url), {"mock": mock.provider()})
    try:
        body = httpx.get(node.url + "/healthz").json()
        assert body["status"] == "degraded" and "redis-eviction" in body["down"]
        assert any("allkeys-lru" in w for w in body["warnings"])
    finally:
        node.close()
        redis.Redis(port=lru.port).flushall()


def test_a_store_that_hides_its_policy_is_warned_about_not_refused(redis_server):
    """An ACL that allows neither CONFIG nor INFO: the policy cannot be read. Refusing would make
    such a deployment unusable, so upgate warns and goes on."""
    admin = redis.Redis(port=redis_server.port)
    admin.acl_setuser("limited", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                      commands=["+@all", "-config", "-info"])
    try:
        url = f"redis://limited:pw@127.0.0.1:{redis_server.port}/0"
        warnings = store_policy.check(store.connect_sync(url), url, env={})
        assert any("could not read" in w for w in warnings)
    finally:
        admin.acl_deluser("limited")
