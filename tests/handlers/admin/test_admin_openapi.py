"""The OpenAPI document of /admin/v1: built from the handlers' own declarations (a test fails
when a handler answers a verb it does not document), valid OpenAPI 3.1, served without a
token, and a bounded schema-driven fuzz (schemathesis) against a running node finds no 5xx."""
from __future__ import annotations

import time

import httpx
import tornado.web
from hypothesis import HealthCheck, given, settings
from openapi_spec_validator import validate

from tests.admin_kit import make_token
from upgate.app import make_app
from upgate.handlers import admin
from upgate.handlers.admin.spec import tornado_pattern

VERBS = ("get", "head", "post", "delete", "patch", "put", "options")


def test_every_admin_route_and_verb_has_its_schema():
    for h in admin.HANDLERS:
        assert h.PATH.startswith("/admin/v1/") and h.OPS, h
        served = {v for v in VERBS if getattr(h, v) is not getattr(tornado.web.RequestHandler, v)}
        assert served == set(h.OPS), (h.__name__, served, set(h.OPS))
        for verb, op in h.OPS.items():
            assert op.response and op.summary, (h.__name__, verb)
            if verb in ("post", "put", "patch") and op.body is None:
                assert h.json_body is not None  # bodiless writes still refuse unknown fields


def test_the_route_table_mounts_exactly_the_documented_routes():
    app = make_app(ctx=None)
    mounted = {r.matcher.regex.pattern for r in app.wildcard_router.rules
               if r.matcher.regex.pattern.startswith("/admin/v1")}  # not the console's pages
    doc = admin.openapi()
    # and, last, the API's own 404 for any other path under it (its shape, Cache-Control)
    assert mounted == {tornado_pattern(p) for p in doc["paths"]} | {"/admin/v1/.*$"}
    assert len(doc["paths"]) == len(admin.HANDLERS) == 29  # + notes, request search (the support desk)


def test_the_document_is_valid_openapi_31():
    doc = admin.openapi()
    validate(doc)
    assert doc["openapi"] == "3.1.0"
    money_ops = [doc["paths"]["/admin/v1/accounts/{id}/topups"]["post"]]
    assert {"200", "201", "409", "403"} <= set(money_ops[0]["responses"])


def test_served_without_a_token(node):
    resp = httpx.get(node.url + "/admin/v1/openapi.json", timeout=30)
    assert resp.status_code == 200 and resp.json() == admin.openapi()


def test_schema_driven_fuzz_finds_no_server_error(node, redis_url):
    import schemathesis

    @schemathesis.serializer("application/toml")
    def toml(ctx, value):
        return value.encode() if isinstance(value, str) else b""

    token = make_token(redis_url)
    schema = schemathesis.openapi.from_dict(admin.openapi())
    started, failures, calls = time.monotonic(), [], 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=15, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case):
            nonlocal calls
            calls += 1
            resp = case.call(base_url=node.url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
            if resp.status_code >= 500:
                failures.append((operation.label, resp.status_code, resp.text[:300]))

        run()
    assert not failures, (sorted({f[0] for f in failures}), failures[:3])
    assert calls >= 100
    assert time.monotonic() - started < 50
