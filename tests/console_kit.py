"""Helpers for the console's tests: admin tokens, and an HTTP session that signs in the way
a browser does (GET the form for its XSRF cookie and field, POST the token)."""
from __future__ import annotations

import re

import httpx

from tests.gateway import PEPPER
from upgate.services import admin_tokens
from upgate.store import connection as store

XSRF_FIELD = re.compile(r'name="_xsrf" value="([^"]+)"')


def admin_token(redis_url: str, name: str = "ops", read_only: bool = False) -> str:
    return admin_tokens.create(store.connect_sync(redis_url), PEPPER, name, read_only=read_only)["token"]


def xsrf(html: str) -> str:
    return XSRF_FIELD.search(html).group(1)


def signed_in(node, token: str, **client_kwargs) -> httpx.Client:
    c = httpx.Client(base_url=node.url, follow_redirects=False, timeout=30, **client_kwargs)
    form = c.get("/admin/login")
    r = c.post("/admin/login", data={"token": token, "_xsrf": xsrf(form.text), "next": "/admin/"})
    assert r.status_code == 303 and r.headers["location"] == "/admin/", r.text
    return c
