"""Helpers for the management API suites: an admin token on the private Redis and a small
HTTP client for /admin/v1 on a running node."""
from __future__ import annotations

import httpx

from tests.gateway import PEPPER
from upgate.services import admin_tokens
from upgate.store import connection as store

MESSAGES = {
    "invalid_admin_token": "The admin token is missing, invalid or revoked.",
    "read_only_token": "This admin token is read-only.",
}


def make_token(redis_url: str, name: str = "ops", read_only: bool = False) -> str:
    return admin_tokens.create(store.connect_sync(redis_url), PEPPER, name, read_only)["token"]


class Admin:
    """`api.get("/accounts")` → the httpx response of GET /admin/v1/accounts with the token."""

    def __init__(self, node, token: str | None):
        self.base = node.url + "/admin/v1"
        self.token = token

    def request(self, method: str, path: str, *, token: str | None = "default", headers=None, **kw):
        h = dict(headers or {})
        token = self.token if token == "default" else token
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        return httpx.request(method, self.base + path, headers=h, timeout=30, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def patch(self, path, **kw):
        return self.request("PATCH", path, **kw)

    def put(self, path, **kw):
        return self.request("PUT", path, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def account(self, phone: str | None = None, balance: str = "1000") -> dict:
        from tests.gateway import fresh_phone

        resp = self.post("/accounts", json={"phone": phone or fresh_phone(), "balance_toman": balance})
        assert resp.status_code == 201, resp.text
        return resp.json()


def assert_error(resp: httpx.Response, status: int, code: str, param: str | None = None) -> dict:
    """The client API's error shape, with `param` naming the field at fault."""
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "code", "param"}, err
    assert err["type"] == err["code"] == code, err
    assert err["param"] == param, err
    if code in MESSAGES:
        assert err["message"] == MESSAGES[code]
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers["X-Svc-Request-Id"].startswith("req_")
    return err
