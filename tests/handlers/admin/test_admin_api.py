"""The management API through a running gateway node on a private redis-server: auth and its
codes, accounts, keys (working on /v1 and revoked there), models, reports, the admin log."""
from __future__ import annotations

import json

import httpx
import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli
from tests.admin_kit import Admin, assert_error, make_token
from tests.gateway import CATALOG, PEPPER
from tests.load_kit import wait_for
from tests.services.test_transactions import replicated  # noqa: F401  (a fixture: a master and its replica)

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]


@pytest.fixture
def api(node, redis_url):
    return Admin(node, make_token(redis_url))


def chat(node, key: str) -> httpx.Response:
    return httpx.post(node.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": "mock/chat-1", "messages": HELLO, "max_tokens": 8}, timeout=30)


def dump(redis_url) -> dict:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    out = {}
    for k in r.keys("*"):
        kind = r.type(k)
        out[k] = (r.hgetall(k) if kind == "hash" else r.smembers(k) if kind == "set"
                  else r.lrange(k, 0, -1) if kind == "list" else r.get(k) if kind == "string" else kind)
    return out


# ---- auth -------------------------------------------------------------------------------------

@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer"}, {"Authorization": "Basic abc"},
    {"Authorization": "Bearer upa_" + "x" * 40}, {"Authorization": "Bearer nonsense"},
])
def test_missing_or_unknown_token_is_401(api, headers):
    resp = httpx.get(api.base + "/accounts", headers=headers, timeout=30)
    assert_error(resp, 401, "invalid_admin_token")
    assert resp.headers["x-should-retry"] == "false"


def test_client_keys_never_work_here_and_admin_tokens_never_on_v1(api, node, redis_url):
    acct = api.account()
    key = api.post(f"/accounts/{acct['id']}/keys", json={}).json()["key"]
    assert_error(api.get("/accounts", token=key), 401, "invalid_admin_token")
    assert_error(api.get("/accounts", token=None, headers={"X-API-Key": api.token}), 401, "invalid_admin_token")
    for resp in (chat(node, api.token), httpx.get(node.base + "/svc/me", headers={"X-API-Key": api.token})):
        assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"
    assert chat(node, key).status_code == 200


def test_read_only_token_reads_and_cannot_write(api, node, redis_url):
    acct = api.account()
    ro = Admin(node, make_token(redis_url, "viewer", read_only=True))
    assert ro.get(f"/accounts/{acct['id']}").json() == acct
    before = dump(redis_url)
    for method, path, body in [("POST", "/accounts", {"phone": "09120000001"}),
                               ("PATCH", f"/accounts/{acct['id']}", {"free_quota_per_day": 3}),
                               ("POST", f"/accounts/{acct['id']}/suspend", None),
                               ("POST", f"/accounts/{acct['id']}/keys", {}),
                               ("POST", f"/accounts/{acct['id']}/topups", {"amount_toman": "5"})]:
        assert_error(ro.request(method, path, json=body), 403, "read_only_token")
    assert_error(ro.put("/models", content=b"", headers={"Content-Type": "application/toml"}),
                 403, "read_only_token")
    after = dump(redis_url)
    after.pop("{admin}:token_used"), before.pop("{admin}:token_used")
    assert after == before


def test_a_token_revoked_by_the_cli_is_refused_on_a_second_node_at_once(api, make_node, redis_url):
    other = Admin(make_node(), api.token)
    assert other.get("/accounts").status_code == 200  # cached on that node now
    assert api.get("/accounts").status_code == 200
    res = CliRunner().invoke(cli, ["admin-token", "revoke", "ops", "--json"],
                             env={"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER})
    assert res.exit_code == 0, res.stderr
    # pub/sub is asynchronous: wait only for delivery (ms), far below the 60 s cache life
    wait_for(lambda: other.get("/accounts").status_code == 401, 2, "the revocation on node 2")
    assert_error(other.get("/accounts"), 401, "invalid_admin_token")
    assert_error(api.get("/accounts"), 401, "invalid_admin_token")


def test_failed_authentications_are_throttled_per_address(api, node):
    bad = "upa_" + "y" * 40
    for _ in range(10):
        assert_error(api.get("/accounts", token=bad), 401, "invalid_admin_token")
    resp = api.get("/accounts", token=bad)
    assert_error(resp, 429, "admin_auth_throttled")
    assert 1 <= int(resp.headers["Retry-After"]) <= 7
    # X-Forwarded-For is not believed without UPGATE_TRUSTED_PROXIES: still throttled
    assert api.get("/accounts", token=bad, headers={"X-Forwarded-For": "203.0.113.9"}).status_code == 429
    assert api.get("/accounts", token=None).status_code == 429
    assert httpx.get(api.base + "/openapi.json").status_code == 200  # no token, no throttle


def test_the_throttle_never_refuses_a_live_token(api, node, redis_url):
    """Failures are throttled, not owners: one bad token every 6 s from the same NAT used to
    lock every operator behind it out. Unknown tokens stay throttled, without a lookup."""
    unused = make_token(redis_url, "unused")  # live, never seen by the node (not in its cache)
    for _ in range(11):
        api.get("/accounts", token="upa_" + "y" * 40)
    assert_error(api.get("/accounts", token="upa_" + "q" * 40), 429, "admin_auth_throttled")
    assert api.get("/accounts").status_code == 200
    assert api.get("/accounts", token=unused).status_code == 200
    fresh = make_token(redis_url, "fresh")  # created while the address is throttled
    wait_for(lambda: api.get("/accounts", token=fresh).status_code == 200, 2, "the new token")
    res = CliRunner().invoke(cli, ["admin-token", "revoke", "unused", "--json"],
                             env={"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER})
    assert res.exit_code == 0, res.stderr
    wait_for(lambda: api.get("/accounts", token=unused).status_code == 429, 2, "the revocation")
    assert api.get("/accounts").status_code == 200  # the owner still gets in


def test_every_answer_says_no_store(api, node, redis_url):
    """docs/admin-api.md promised Cache-Control: no-store; no answer carried it."""
    acct = api.account()
    reader = make_token(redis_url, "reader", read_only=True)
    answers = [
        api.get("/accounts"), api.get(f"/accounts/{acct['id']}"),
        api.post("/accounts", json={"phone": "09120000009"}),
        api.get("/accounts", token=None),  # 401
        api.post("/accounts", token=reader, json={"phone": "09120000008"}),  # 403
        api.get("/accounts/00000000-0000-0000-0000-000000000000"),  # 404
        api.get("/no-such-route"), api.post("/no-such-route", content=b"x" * 100_000),  # 404
        api.delete("/accounts"),  # 405
        api.post("/accounts", content=b"{nope"),  # 400
        api.post("/accounts", content=b"x" * (21 << 20)),  # 413
        httpx.get(api.base + "/openapi.json"),
    ]
    for _ in range(11):
        answers.append(api.get("/accounts", token="upa_" + "w" * 40))  # 401 …, then 429
    seen = {r.status_code for r in answers}
    assert seen == {200, 201, 400, 401, 403, 404, 405, 413, 429}, seen
    for r in answers:
        assert r.headers.get("Cache-Control") == "no-store", (r.status_code, r.request.url)


def test_forwarded_address_counts_behind_a_trusted_proxy(make_node, redis_url):
    node = make_node(trusted_proxies="127.0.0.1")
    api = Admin(node, make_token(redis_url))
    for _ in range(10):
        api.get("/accounts", token="upa_" + "z" * 40, headers={"X-Forwarded-For": "198.51.100.7"})
    bad = "upa_" + "z" * 40
    throttled = api.get("/accounts", token=bad, headers={"X-Forwarded-For": "198.51.100.7"})
    assert_error(throttled, 429, "admin_auth_throttled")
    assert api.get("/accounts", token=bad, headers={"X-Forwarded-For": "198.51.100.8"}).status_code == 401
    assert api.get("/accounts", token=bad).status_code == 401  # the proxy itself is not throttled


# ---- accounts ---------------------------------------------------------------------------------

def test_account_create_get_patch_suspend_resume(api, node):
    acct = api.account(phone="09121234567", balance="1500.25")
    assert acct == {"id": acct["id"], "phone": "+989121234567", "status": "active",
                    "balance_toman": "1500.250000", "held_toman": "0.000000",
                    "available_toman": "1500.250000", "free_quota_per_day": 50,
                    "low_balance_toman": None, "created_at": acct["created_at"]}
    assert acct["created_at"].endswith("Z")
    assert api.get(f"/accounts/{acct['id']}").json() == acct
    patched = api.patch(f"/accounts/{acct['id']}", json={"free_quota_per_day": 3, "low_balance_toman": "200"})
    assert patched.status_code == 200
    assert patched.json() == dict(acct, free_quota_per_day=3, low_balance_toman="200.000000")
    cleared = api.patch(f"/accounts/{acct['id']}", json={"free_quota_per_day": None, "low_balance_toman": None})
    assert cleared.json() == acct
    assert api.post(f"/accounts/{acct['id']}/suspend").json()["status"] == "suspended"
    key = api.post(f"/accounts/{acct['id']}/keys", json={}).json()["key"]
    assert chat(node, key).json()["error"]["code"] == "account_suspended"
    assert api.post(f"/accounts/{acct['id']}/resume").json() == acct
    assert chat(node, key).status_code == 200


def test_account_refusals_name_the_field_and_write_nothing(api, redis_url):
    acct = api.account()
    before = dump(redis_url)
    cases = [
        (api.post("/accounts", json={"phone": "12"}), "phone"),
        (api.post("/accounts", json={}), "phone"),
        (api.post("/accounts", json={"phone": "09120000000", "balance_toman": 100}), "balance_toman"),
        (api.post("/accounts", json={"phone": "09120000000", "balance_toman": "1e3"}), "balance_toman"),
        (api.post("/accounts", json={"phone": "09120000000", "balance_toman": "-5"}), "balance_toman"),
        (api.post("/accounts", json={"phone": "09120000000", "color": "red"}), "color"),
        (api.patch(f"/accounts/{acct['id']}", json={"free_quota_per_day": -1, "low_balance_toman": "5"}),
         "free_quota_per_day"),
        (api.patch(f"/accounts/{acct['id']}", json={"free_quota_per_day": 5, "low_balance_toman": "x"}),
         "low_balance_toman"),
        (api.get("/accounts?limit=0"), "limit"),
        (api.get("/accounts?cursor=nope"), "cursor"),
    ]
    for resp, param in cases:
        assert_error(resp, 400, "invalid_request", param)
    assert_error(api.patch(f"/accounts/{acct['id']}", json={}), 400, "invalid_request")
    assert_error(api.post("/accounts", content=b"{not json"), 400, "invalid_request")
    assert_error(api.post("/accounts", json=[1]), 400, "invalid_request")
    unknown = "00000000-0000-4000-8000-000000000000"
    for resp in (api.get(f"/accounts/{unknown}"), api.get("/accounts/not-a-uuid"),
                 api.patch(f"/accounts/{unknown}", json={"free_quota_per_day": 1}),
                 api.post(f"/accounts/{unknown}/suspend"), api.get(f"/accounts/{unknown}/keys"),
                 api.get(f"/accounts/{unknown}/usage"), api.get("/nothing-here")):
        assert_error(resp, 404, "not_found")
    after = dump(redis_url)
    after.pop("{admin}:token_used"), before.pop("{admin}:token_used")
    assert after == before


def test_account_list_pages_by_cursor_and_filters_by_phone(api):
    made = sorted([api.account(phone=f"0912000000{i}")["id"] for i in range(5)]
                  + [api.account(phone="09120000009")["id"]])
    seen, cursor = [], None
    while True:
        page = api.get("/accounts", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        assert len(page["data"]) <= 2
        seen += [a["id"] for a in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == made
    by_phone = api.get("/accounts", params={"phone": "۰۹۱۲۰۰۰۰۰۰۱"}).json()  # any spelling finds it
    assert [a["phone"] for a in by_phone["data"]] == ["+989120000001"] and by_phone["next_cursor"] is None


def test_a_phone_in_use_is_409_phone_in_use(api):
    api.account(phone="09120000001")
    r = api.post("/accounts", json={"phone": "+98 912 000 0001"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "phone_in_use"
    assert r.json()["error"]["param"] == "phone"
    assert len(api.get("/accounts", params={"phone": "09120000001"}).json()["data"]) == 1


# ---- keys -------------------------------------------------------------------------------------

def test_a_key_made_over_http_works_on_v1_and_delete_revokes_it_at_once(api, node):
    acct = api.account()
    resp = api.post(f"/accounts/{acct['id']}/keys",
                    json={"name": "web", "monthly_limit_toman": "200", "rate_limit_rpm": 120,
                          "allowed_models": ["mock/chat-1"], "expires_at": "2035-01-01T00:00:00Z"})
    assert resp.status_code == 201, resp.text
    made = resp.json()
    key = made.pop("key")
    assert key.startswith("sk-up-") and made["prefix"] == key[:10] and made["last4"] == key[-4:]
    assert made["status"] == made["state"] == "active" and made["rpm"] == 120
    assert made["monthly_limit_toman"] == "200.000000" and made["expires_at"] == "2035-01-01T00:00:00Z"
    assert api.get(f"/keys/{made['key_id']}").json() == made
    assert chat(node, key).status_code == 200
    listed = api.get(f"/accounts/{acct['id']}/keys").json()["data"]
    assert [k["key_id"] for k in listed] == [made["key_id"]] and key not in json.dumps(listed)

    cleared = api.patch(f"/keys/{made['key_id']}", json={"monthly_limit_toman": None, "allowed_models": None,
                                                         "name": None, "expires_at": None}).json()
    assert (cleared["monthly_limit_toman"], cleared["allowed_models"], cleared["name"],
            cleared["expires_at"]) == (None, None, None, None)
    assert api.patch(f"/keys/{made['key_id']}", json={"allowed_models": ["mock/chat-big"]}).status_code == 200
    assert chat(node, key).json()["error"]["code"] == "model_not_allowed"

    gone = api.delete(f"/keys/{made['key_id']}")
    assert gone.status_code == 200 and gone.json()["status"] == "revoked"
    assert chat(node, key).json()["error"]["code"] == "invalid_api_key"
    assert_error(api.patch(f"/keys/{made['key_id']}", json={"rate_limit_rpm": 5}), 400, "invalid_request")


def test_key_refusals(api, redis_url):
    acct = api.account()
    kid = api.post(f"/accounts/{acct['id']}/keys", json={}).json()["key_id"]
    before = dump(redis_url)
    for body, param in [({"rate_limit_rpm": 0}, "rate_limit_rpm"), ({"rate_limit_rpm": "5"}, "rate_limit_rpm"),
                        ({"allowed_models": "mock/chat-1"}, "allowed_models"),
                        ({"allowed_models": ["Bad Id"]}, "allowed_models"),
                        ({"expires_at": "2001-01-01"}, "expires_at"), ({"expires_at": 5}, "expires_at"),
                        ({"monthly_limit_toman": 5}, "monthly_limit_toman"), ({"name": "x" * 101}, "name"),
                        ({"nope": 1}, "nope")]:
        assert_error(api.post(f"/accounts/{acct['id']}/keys", json=body), 400, "invalid_request", param)
        assert_error(api.patch(f"/keys/{kid}", json=body), 400, "invalid_request", param)
    assert_error(api.patch(f"/keys/{kid}", json={}), 400, "invalid_request")
    for resp in (api.get("/keys/ffffffffffffffff"), api.patch("/keys/ffffffffffffffff", json={"name": "a"}),
                 api.delete("/keys/ffffffffffffffff"), api.get("/keys/bad%20id")):
        assert_error(resp, 404, "not_found")
    after = dump(redis_url)
    after.pop("{admin}:token_used"), before.pop("{admin}:token_used")
    assert after == before


# ---- models, reports, the admin log ------------------------------------------------------------

def test_models_get_and_put(api, node):
    got = api.get("/models").json()
    ids = [m["id"] for m in got["data"]]
    assert "mock/hidden" in ids and got["version"] and got["prices_updated_at"].endswith("Z")
    assert got["data"][ids.index("mock/hidden")]["hidden"] is True
    toml = CATALOG.read_text().replace('prompt_toman_per_million = "150000"', 'prompt_toman_per_million = "160000"', 1)
    resp = api.put("/models", content=toml.encode(), headers={"Content-Type": "application/toml"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["version"] != got["version"] and resp.json()["models"] == len(ids)
    assert wait_for(lambda: node.ctx.catalog.version == resp.json()["version"], 5, "the swap on the node")
    bad = toml + '\n[[models]]\nid = "Bad Id"\nprovider = "mock"\n'
    before = api.get("/models").json()
    assert_error(api.put("/models", content=bad.encode(), headers={"Content-Type": "application/toml"}),
                 400, "invalid_request")
    unknown_provider = toml.replace('provider = "dead"', 'provider = "nobody"')
    assert_error(api.put("/models", content=unknown_provider.encode(),
                         headers={"Content-Type": "application/toml"}), 400, "invalid_request")
    assert_error(api.put("/models", content=toml.encode(), headers={"Content-Type": "application/json"}),
                 400, "invalid_request", "Content-Type")
    assert api.get("/models").json() == before


def test_usage_and_overview(api, node):
    acct = api.account()
    key = api.post(f"/accounts/{acct['id']}/keys", json={}).json()
    assert chat(node, key["key"]).status_code == 200
    report = api.get(f"/accounts/{acct['id']}/usage", params={"group_by": "model"}).json()
    assert report["rows"][0]["model"] == "mock/chat-1" and report["totals"]["requests"] == 1
    assert report["account_id"] == acct["id"] and report["group_by"] == "model"
    assert_error(api.get(f"/accounts/{acct['id']}/usage", params={"group_by": "x"}), 400, "invalid_request", "group_by")
    assert_error(api.get(f"/accounts/{acct['id']}/usage", params={"from": "1405-13-01"}), 400, "invalid_request", "from")
    assert_error(api.get("/overview", params={"from": "1405-09-10", "to": "1405-09-01"}), 400, "invalid_request", "to")
    over = api.get("/overview").json()
    assert over["totals"]["requests"] == 1
    assert over["totals"]["charges_toman"] == report["totals"]["cost_toman"]
    assert sum(d["requests"] for d in over["days"]) == 1 and over["days"][0]["day"] == over["from"]


def test_every_write_is_in_the_audit_log_without_secrets(api, redis_url):
    acct = api.account()
    made = api.post(f"/accounts/{acct['id']}/keys", json={"name": "a"}).json()
    api.patch(f"/accounts/{acct['id']}", json={"low_balance_toman": "10"})
    api.get(f"/accounts/{acct['id']}")
    api.post("/accounts", json={"phone": "1"})  # refused: not a write
    log = api.get("/audit-log").json()["data"]
    assert [(e["actor"], e["action"], e["target"]) for e in log] == [
        ("ops", "account.update", acct["id"]),
        ("ops", "key.create", acct["id"]),
        ("ops", "account.create", acct["id"])]
    assert log[0]["detail"] == {"low_balance_toman": "10"}
    text = json.dumps(log)
    assert made["key"] not in text and api.token not in text
    assert api.get("/audit-log", params={"limit": 1}).json()["data"] == log[:1]
    assert_error(api.get("/audit-log", params={"limit": "0"}), 400, "invalid_request", "limit")


def test_the_client_path_does_no_admin_work(api, node, redis_url):
    """/v1 requests never reach the admin block (nor the dashboard's, /pricing included): their rules come after
    every /v1 rule, and a node that served only clients has not even made the admin pool or client."""
    from upgate.app import make_app

    patterns = [r.matcher.regex.pattern for r in make_app(node.ctx).wildcard_router.rules]
    first_admin = min(i for i, p in enumerate(patterns) if p.startswith("/admin/"))
    assert all(not p.startswith("/admin/") for p in patterns[:first_admin])
    assert all(p.startswith(("/admin/", "/dashboard", "/pricing")) for p in patterns[first_admin:])
    assert max(i for i, p in enumerate(patterns) if p.startswith("/v1")) < first_admin

    from tests.gateway import seed

    key, _acct, _kid = seed(redis_url)
    fresh_node_admin = node.ctx.admin
    fresh_node_admin.close()
    fresh_node_admin._client = None
    assert chat(node, key).status_code == 200
    assert not fresh_node_admin._pools and fresh_node_admin._client is None


def test_last_use_is_recorded(api, redis_url):
    from upgate.services import admin_tokens
    from upgate.store import connection as store

    assert api.get("/accounts").status_code == 200
    (tok,) = admin_tokens.list_tokens(store.connect_sync(redis_url))
    assert tok["name"] == "ops" and tok["last_used_at"] is not None


def test_metrics_take_an_admin_token_read_only_too(make_node, redis_url):
    node = make_node(metrics_public=False)
    ro = make_token(redis_url, "grafana", read_only=True)
    assert httpx.get(node.url + "/metrics", headers={"Authorization": f"Bearer {ro}"}).status_code == 200
    assert httpx.get(node.url + "/metrics", headers={"Authorization": "Bearer upa_" + "q" * 40}).status_code == 401


def test_an_account_created_that_no_replica_confirmed_is_a_503_naming_it(mock, replicated, monkeypatch):
    """POST /admin/v1/accounts whose opening no replica confirmed: the account exists on the
    master, so the answer must name it (not a bare 500) or the caller creates it again."""
    import os
    import signal

    from tests.gateway import Node, load_catalog, test_settings
    from upgate.services import accounts, transactions
    from upgate.store import connection as store

    master, replica = replicated
    load_catalog(master.url)
    node = Node(test_settings(master.url), {"mock": mock.provider()})
    try:
        api = Admin(node, make_token(master.url))
        monkeypatch.setattr(transactions, "REPLICA_WAIT_MS", 300)
        os.kill(replica.proc.pid, signal.SIGSTOP)
        try:
            r = api.post("/accounts", json={"phone": "09121234567", "balance_toman": "500"})
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        [made] = accounts.list_accounts(store.connect_sync(master.url))
        assert r.status_code == 503, r.text
        assert made["account_id"] in r.json()["error"]["message"]
    finally:
        node.close()
