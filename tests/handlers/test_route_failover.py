"""Failover between a model's routes, through a running gateway against real mock providers:
the order, the weights, exact billing and records, what is not retried (docs/routes.md)."""
import httpx
import openai
import pytest

from upgate.billing import money

from tests.routes.route_kit import chat, configure, cost_micro, route_mocks, routed, served  # noqa: F401


def test_failover_order_bills_once_at_the_catalog_price_and_names_the_route(routed):
    node = routed.node()
    configure(routed.mocks["two"], status=500)
    before = routed.balance_micro()
    resp = chat(node, routed.key, "mock/r-order")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    # dead (priority 0) refused the connection, two (1) answered 500, one (2) answered
    assert served(routed.mocks["two"]) == 1 and served(routed.mocks["one"]) == 1
    assert body["model"] == "mock/r-order" and body["provider"] == "one"
    assert before - routed.balance_micro() == cost_micro(body["usage"])  # one answer billed
    rec = routed.record(resp.headers["X-Svc-Request-Id"])
    assert rec["provider"] == "one" and rec["status"] == 200
    assert rec["cost_toman"] == money.fmt(cost_micro(body["usage"]))
    from upgate.services import accounts
    assert accounts.show(routed.client, routed.account_id)["held_micro"] == 0  # the one hold is closed


def test_every_route_failing_releases_the_hold_and_charges_nothing(routed):
    node = routed.node()
    configure(routed.mocks["two"], status=500)
    configure(routed.mocks["one"], status=503)
    before = routed.balance_micro()
    resp = chat(node, routed.key, "mock/r-order")
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_error"
    assert served(routed.mocks["two"]) == 1 and served(routed.mocks["one"]) == 1
    assert routed.balance_micro() == before
    rec = routed.record(resp.headers["X-Svc-Request-Id"])
    assert rec["cost_toman"] == "0.000000" and rec["provider"] is None and rec["status"] == 502


@pytest.mark.parametrize("status", [401, 403, 429, 500, 502])
def test_a_refused_key_429_and_5xx_go_to_the_next_route_and_never_cool_the_model(routed, status):
    node = routed.node(cooldown_strikes=1)
    configure(routed.mocks["two"], status=status)
    for _ in range(2):
        resp = chat(node, routed.key, "mock/r-pair")
        assert resp.status_code == 200 and resp.json()["provider"] == "one"
    assert node.ctx.ledger.cold_until("mock/r-pair") is None  # only route health moved


def test_a_slow_first_byte_times_out_and_goes_to_the_next_route(routed):
    node = routed.node(upstream_silence_s=0.5)
    configure(routed.mocks["three"], latency_ms=3000)
    resp = chat(node, routed.key, "mock/r-slow")
    assert resp.status_code == 200 and resp.json()["provider"] == "one"
    model = node.ctx.catalog.get("mock/r-slow")
    assert node.ctx.routes.failures(model.id, model.routes[0]) == 1


def test_a_stream_that_failed_after_its_first_byte_is_not_retried_elsewhere(routed):
    node = routed.node()
    configure(routed.mocks["two"], cut_after=2)
    before = routed.balance_micro()
    client = openai.OpenAI(base_url=node.base, api_key=routed.key, max_retries=0)
    got = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(
                model="mock/r-pair", messages=[{"role": "user", "content": "hello world!"}], stream=True):
            got += [c.delta.content for c in chunk.choices if c.delta.content]
    assert got == ["tok0 ", "tok1 "]
    assert served(routed.mocks["two"]) == 1 and served(routed.mocks["one"]) == 0
    assert routed.balance_micro() < before  # what was relayed is settled, once


def test_a_stream_failing_before_its_first_byte_fails_over(routed):
    node = routed.node()
    configure(routed.mocks["two"], cut_after=0)
    client = openai.OpenAI(base_url=node.base, api_key=routed.key, max_retries=0)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="mock/r-pair", messages=[{"role": "user", "content": "hi"}], stream=True) if c.choices)
    assert text.startswith("tok0 ") and served(routed.mocks["one"]) == 1


def test_invalid_request_is_not_retried_on_another_route(routed):
    node = routed.node()
    configure(routed.mocks["two"], status=400)
    resp = chat(node, routed.key, "mock/r-pair")
    assert resp.status_code == 400 and served(routed.mocks["one"]) == 0


def test_allow_fallbacks_false_tries_one_route(routed):
    node = routed.node()
    configure(routed.mocks["two"], status=500)
    resp = chat(node, routed.key, "mock/r-pair", provider={"allow_fallbacks": False})
    assert resp.status_code == 502 and served(routed.mocks["one"]) == 0
    assert served(routed.mocks["two"]) == 1


def test_routes_then_the_models_list(routed):
    node = routed.node()
    configure(routed.mocks["two"], status=500)
    configure(routed.mocks["one"], status=500)
    resp = chat(node, routed.key, "mock/r-pair", models=["mock/r-pair", "mock/r-slow"])
    assert resp.status_code == 200
    assert resp.json()["model"] == "mock/r-slow" and resp.json()["provider"] == "three"
    rec = routed.record(resp.headers["X-Svc-Request-Id"])
    assert rec["answered_model"] == "mock/r-slow" and rec["provider"] == "three"


def test_weights_within_five_percent_over_2000_requests(routed):
    node = routed.node()
    keys = routed.more_keys(4)  # 500 requests each, inside a key's 600 a minute
    with httpx.Client(timeout=30) as http:
        for i in range(2000):
            r = http.post(node.base + "/chat/completions", headers={"Authorization": f"Bearer {keys[i % 4]}"},
                          json={"model": "mock/r-weights", "messages": [{"role": "user", "content": "x"}],
                                "mock": {"chunks": 1}})
            assert r.status_code == 200
    one, two = served(routed.mocks["one"]), served(routed.mocks["two"])
    assert one + two == 2000
    assert abs(one / 2000 - 0.75) < 0.05, (one, two)
