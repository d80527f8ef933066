"""What operators see and write: routes in `models load`, `models sync` and PUT /admin/v1/models
(refused whole when one route is bad), `upgate-admin models routes`, GET /admin/v1/routes, the
per-route metrics (docs/routes.md)."""
from __future__ import annotations

import json
from decimal import Decimal

import httpx
import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from tests.admin_kit import Admin, make_token
from tests.routes.route_kit import chat, configure, route_mocks, routed, served  # noqa: F401
from upgate.catalog import price_sync, rules
from upgate.store import keyspace

PROVIDERS = """
[providers.acme]
base_url = "http://127.0.0.1:1/v1"
api_key_env = ["ROUTES_TEST_KEY_A", "ROUTES_TEST_KEY_B"]

[providers.backup]
base_url = "http://127.0.0.1:2/v1"
"""

ROUTED = """
[[models]]
id = "acme/chat-1"
routes = [
  { provider = "acme", upstream_model = "chat-1", priority = 0, weight = 3 },
  { provider = "backup", upstream_model = "chat-1-b", priority = 1 },
]
prompt_toman_per_million = "15000"
completion_toman_per_million = "60000"

[[models]]
id = "acme/solo"
provider = "backup"
prompt_toman_per_million = "1"
completion_toman_per_million = "1"
"""


@pytest.fixture
def env(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("UPGATE_REDIS_URL", redis_url)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "providers.toml").write_text(PROVIDERS)
    (tmp_path / "routed.toml").write_text(ROUTED)
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env={"COLUMNS": "200"})


def test_load_then_routes_json_and_table(env):
    assert invoke("models", "load", "routed.toml", "--providers", "providers.toml").exit_code == 0
    out = json.loads(invoke("models", "routes", "--json").stdout)
    assert out == {"routes": [
        {"model": "acme/chat-1", "provider": "acme", "upstream_model": "chat-1", "priority": 0, "weight": 3,
         "state": "healthy", "cold_until": None, "failures": 0},
        {"model": "acme/chat-1", "provider": "backup", "upstream_model": "chat-1-b", "priority": 1,
         "weight": 1, "state": "healthy", "cold_until": None, "failures": 0},
        {"model": "acme/solo", "provider": "backup", "upstream_model": "acme/solo", "priority": 0,
         "weight": 1, "state": "healthy", "cold_until": None, "failures": 0}]}
    one = json.loads(invoke("models", "routes", "acme/solo", "--json").stdout)["routes"]
    assert [r["model"] for r in one] == ["acme/solo"]
    table = invoke("models", "routes").stdout
    assert "chat-1-b" in table and "healthy" in table
    listed = {m["id"]: m for m in json.loads(invoke("models", "list", "--json").stdout)["models"]}
    assert listed["acme/chat-1"]["provider"] == "acme" and len(listed["acme/chat-1"]["routes"]) == 2


def test_routes_of_an_unknown_model_is_refused_in_one_line(env):
    invoke("models", "load", "routed.toml", "--providers", "providers.toml")
    res = invoke("models", "routes", "acme/nope")
    assert res.exit_code != 0 and "acme/nope" in res.stderr and "Traceback" not in res.output


@pytest.mark.parametrize("bad, message", [
    ('{ provider = "nobody" }', "provider 'nobody' is not in the providers file"),
    ('{ provider = "acme", weight = 0 }', "weight must be a whole number"),
    ('{ provider = "acme", priority = "high" }', "priority must be a whole number"),
    ('{ provider = "acme", region = "eu" }', "unknown field 'region'"),
])
def test_a_bad_route_refuses_the_whole_file_and_writes_nothing(env, r, bad, message):
    invoke("models", "load", "routed.toml", "--providers", "providers.toml")
    (env / "bad.toml").write_text(ROUTED.replace('{ provider = "backup", upstream_model = "chat-1-b", priority = 1 }', bad))
    res = invoke("models", "load", "bad.toml", "--providers", "providers.toml")
    assert res.exit_code != 0 and message in res.stderr and "entry 1 (acme/chat-1)" in res.stderr
    assert r.hget(keyspace.CATALOG_META, "version") == "1"  # the catalog in force stayed


def test_models_sync_reprices_a_routed_model_and_keeps_its_routes():
    old = rules.parse(ROUTED, {"acme", "backup"})
    source = [price_sync.SourceModel(id="chat-1-b", name="Chat", context_length=None, max_completion_tokens=None,
                                     pricing={"prompt": Decimal("0.000001"), "completion": Decimal("0.000002")})]
    plan = price_sync.plan(old, source, provider="backup", rate=Decimal(60000), markup=Decimal(1))
    new = {m.id: m for m in rules.validate(plan.entries, {"acme", "backup"})}
    assert new["acme/chat-1"].routes == old[0].routes
    assert new["acme/chat-1"].prompt_toman_per_million != old[0].prompt_toman_per_million


def test_api_routes_put_refusal_and_metrics(routed):
    node = routed.node(route_failures=1)
    api = Admin(node, make_token(routed.redis_url))
    configure(routed.mocks["two"], status=500)
    assert chat(node, routed.key, "mock/r-pair").status_code == 200
    resp = api.get("/routes", params={"model": "mock/r-pair"})
    assert resp.status_code == 200, resp.text
    rows = resp.json()["routes"]
    assert [(r["provider"], r["state"]) for r in rows] == [("two", "cold"), ("one", "healthy")]
    assert set(rows[0]) == {"model", "provider", "upstream_model", "priority", "weight", "state",
                            "cold_until", "failures"}
    assert len(api.get("/routes").json()["routes"]) >= 8
    missing = api.get("/routes", params={"model": "mock/nope"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    bad = 'routes = [{ provider = "ghost" }]\nprompt_toman_per_million = "1"\ncompletion_toman_per_million = "1"\n'
    put = api.put("/models", content=f'[[models]]\nid = "mock/x"\n{bad}'.encode(),
                  headers={"Content-Type": "application/toml"})
    assert put.status_code == 400 and "ghost" in put.json()["error"]["message"]
    assert api.get("/models").json()["version"] == "1"
    assert "/admin/v1/routes" in api.get("/openapi.json").json()["paths"]
    metrics = httpx.get(node.url + "/metrics").text
    assert 'upgate_route_requests_total{model="mock/r-pair",outcome="upstream_error",route="two|m"} 1.0' in metrics
    assert 'upgate_route_requests_total{model="mock/r-pair",outcome="ok",route="one|m"} 1.0' in metrics
    assert 'upgate_route_seconds_count{model="mock/r-pair",route="one|m"} 1.0' in metrics
