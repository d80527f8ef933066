"""Route health shared by every node through Redis: a route cooled on one node is skipped by
another, comes back after the cool-down, a model is cold only when every route is, and a
refused pooled key leaves the pool everywhere (docs/routes.md)."""
import logging
import time

from tests.routes.route_kit import KEYS, chat, configure, route_mocks, routed, served, wait_for  # noqa: F401
from upgate.services import routes as routes_service


def _route(node, model_id: str, provider: str):
    model = node.ctx.catalog.get(model_id)
    return model, next(r for r in model.routes if r.provider == provider)


def test_a_route_cooled_on_one_node_is_skipped_by_another(routed):
    a, b = routed.node(route_failures=2), routed.node(route_failures=2)
    configure(routed.mocks["two"], status=500)
    for _ in range(2):
        assert chat(a, routed.key, "mock/r-pair").json()["provider"] == "one"
    assert served(routed.mocks["two"]) == 2
    model, two = _route(b, "mock/r-pair", "two")
    wait_for(lambda: b.ctx.routes.cold_left(model.id, two) is not None)  # by pub/sub
    configure(routed.mocks["two"])  # healthy again, but cold until the cool-down ends
    for _ in range(5):
        assert chat(b, routed.key, "mock/r-pair").json()["provider"] == "one"
    assert served(routed.mocks["two"]) == 2  # node b never tried it
    rows = routes_service.report(routed.client, "mock/r-pair")["routes"]
    assert [(r["provider"], r["state"]) for r in rows] == [("two", "cold"), ("one", "healthy")]
    assert rows[0]["cold_until"].endswith("Z") and rows[1]["cold_until"] is None


def test_a_node_started_later_reads_the_health_from_the_store(routed):
    a = routed.node(route_failures=1)
    configure(routed.mocks["two"], status=500)
    chat(a, routed.key, "mock/r-pair")
    late = routed.node(route_failures=1)  # never heard the event: reloads on subscribing
    model, two = _route(late, "mock/r-pair", "two")
    assert late.ctx.routes.cold_left(model.id, two) is not None


def test_recovery_after_the_cool_down_and_the_failures_reset(routed):
    node = routed.node(route_failures=2, route_cooldown_s=1.0)
    model, two = _route(node, "mock/r-pair", "two")
    configure(routed.mocks["two"], status=500)
    chat(node, routed.key, "mock/r-pair")
    assert node.ctx.routes.failures(model.id, two) == 1
    chat(node, routed.key, "mock/r-pair")
    assert node.ctx.routes.cold_left(model.id, two) is not None
    configure(routed.mocks["two"])
    time.sleep(1.1)
    assert chat(node, routed.key, "mock/r-pair").json()["provider"] == "two"  # priority 0 again
    # one failure, then success: the run of failures ends, in the store too
    configure(routed.mocks["two"], status=500)
    chat(node, routed.key, "mock/r-pair")
    configure(routed.mocks["two"])
    assert chat(node, routed.key, "mock/r-pair").json()["provider"] == "two"
    wait_for(lambda: routes_service.report(routed.client, "mock/r-pair")["routes"][0]["failures"] == 0)
    assert node.ctx.routes.failures(model.id, two) == 0


def test_a_model_is_cold_only_when_every_route_is(routed):
    node = routed.node(route_failures=1, route_cooldown_s=30.0)
    configure(routed.mocks["two"], status=429)
    assert chat(node, routed.key, "mock/r-pair").status_code == 200  # one is still warm
    configure(routed.mocks["one"], status=429)
    resp = chat(node, routed.key, "mock/r-pair")
    assert resp.status_code == 429  # `one` failed now; `two` was cold, so not tried
    assert served(routed.mocks["two"]) == 1
    resp = chat(node, routed.key, "mock/r-pair")  # both cold: the spec's cool-down, no upstream call
    assert resp.status_code == 429 and resp.json()["error"]["code"] == "upstream_rate_limited"
    assert 1 <= int(resp.headers["Retry-After"]) <= 30
    assert served(routed.mocks["one"]) == 2 and served(routed.mocks["two"]) == 1  # nothing sent


def test_a_single_route_model_keeps_the_spec_cool_down_and_writes_no_route_health(routed):
    node = routed.node(cooldown_strikes=2)
    configure(routed.mocks["two"], status=429)
    for _ in range(2):
        assert chat(node, routed.key, "mock/single").status_code == 429
    resp = chat(node, routed.key, "mock/single")
    assert resp.status_code == 429 and served(routed.mocks["two"]) == 2  # cold: not sent
    assert not list(routed.client.scan_iter(match="{rt:*"))
    row = routes_service.report(routed.client, "mock/single")["routes"][0]
    assert row["state"] == "cold"


def test_a_refused_pooled_key_leaves_the_pool_on_every_node_and_is_logged(routed, caplog):
    a, b = routed.node(), routed.node()
    configure(routed.mocks["pool"], refuse_keys=[KEYS["POOL_KEY_A"]])
    caplog.set_level(logging.WARNING, logger="upgate.routes")
    sent = 0
    while a.ctx.routes.key_out_left("pool", "POOL_KEY_A") is None:  # until the random pick tries A
        assert sent < 40
        resp = chat(a, routed.key, "mock/pooled")
        assert resp.status_code == 200, resp.text  # a refusal goes on with the other key
        sent += 1
    assert served(routed.mocks["pool"]) == sent + 1  # A was refused once, B answered every time
    for _ in range(10):
        assert chat(a, routed.key, "mock/pooled").status_code == 200
    wait_for(lambda: b.ctx.routes.key_out_left("pool", "POOL_KEY_A") is not None)
    for _ in range(6):
        assert chat(b, routed.key, "mock/pooled").status_code == 200
    assert served(routed.mocks["pool"]) == sent + 1 + 16  # A never sent again, on either node
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "refused the key in POOL_KEY_A" in logged
    assert KEYS["POOL_KEY_A"] not in logged and KEYS["POOL_KEY_B"] not in logged


def test_a_pool_whose_every_key_is_refused_answers_502(routed):
    node = routed.node()
    configure(routed.mocks["pool"], refuse_keys=list(KEYS.values()))
    resp = chat(node, routed.key, "mock/pooled")
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_error"
    assert served(routed.mocks["pool"]) == 2  # each key once, then no usable key is left
    assert "sk-pool" not in resp.text
