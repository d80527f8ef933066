"""Console writes against `upgate serve` as a real subprocess: each one is in the access log
(stdout) and in /metrics under its handler's route, with no traceback on stderr; a GET on a
write route is 405 (not the page's handler called with a form's arguments)."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import httpx
import orjson
import pytest

from tests.console_kit import admin_token, signed_in, xsrf
from tests.gateway import PEPPER, load_catalog, seed
from tests.load_kit import wait_for
from tests.procs import free_port, spawn, stop, wait_port
from tests.test_ops import sample, scrape
from tests.test_serve_startup import clean_env


@pytest.fixture
def served(tmp_path, redis_url, mock):
    load_catalog(redis_url)
    providers = tmp_path / "p.toml"
    providers.write_text(f'[providers.mock]\nbase_url = "{mock.base_url}"\ndialect = "openai"\n'
                         '[providers.dead]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')
    port = free_port()
    out, err = tmp_path / "serve.out", tmp_path / "serve.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--port", str(port)],
                     env=clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_KEY_PEPPER=PEPPER,
                                   UPGATE_PROVIDERS=str(providers), UPGATE_METRICS_PUBLIC="1"),
                     cwd=str(tmp_path), stdout=o, stderr=e)
    node = SimpleNamespace(url=f"http://127.0.0.1:{port}", proc=proc, out=out, err=err)
    try:
        wait_port(port, timeout=30, proc=proc)
        wait_for(lambda: httpx.get(node.url + "/healthz", timeout=5).status_code == 200, 20, "a healthy node")
        yield node
    finally:
        stop(proc)


def access_lines(node) -> list[dict]:
    return [orjson.loads(line) for line in node.out.read_bytes().splitlines() if line.startswith(b"{")]


def test_every_console_write_is_logged_and_counted_without_a_traceback(served, redis_url):
    _key, account_id, key_id = seed(redis_url)
    c = signed_in(served, admin_token(redis_url))
    page = f"/admin/accounts/{account_id}"
    token = xsrf(c.get(page, follow_redirects=True).text)
    writes = [("TopupHandler", "/topups", {"amount_toman": "50", "ref": "pay-1"}, 303),
              ("AdjustmentHandler", "/adjustments", {"amount_toman": "-5", "note": "fee"}, 303),
              ("KeyCreateHandler", "/keys", {"name": "k2"}, 201),
              ("KeyUpdateHandler", f"/keys/{key_id}/update", {"name": "renamed"}, 303),
              # what cannot be undone asks first (confirm.html); its page posts confirmed=1
              ("KeyRevokeHandler", f"/keys/{key_id}/revoke", {}, 200),
              ("KeyRevokeHandler", f"/keys/{key_id}/revoke", {"confirmed": "1"}, 303),
              ("SuspendHandler", "/suspend", {"confirmed": "1"}, 303),
              ("SuspendHandler", "/resume", {}, 303)]
    for _handler, path, form, status in writes:
        assert c.post(page + path, data={"_xsrf": token, **form}).status_code == status, path
    assert c.post("/admin/logout", data={"_xsrf": token}).status_code == 303

    expected = [("console:" + h, s) for h, _, _, s in writes] + [("console:LogoutHandler", 303)]
    wait_for(lambda: all(any((x["route"], x["status"], x["method"]) == (r, s, "POST")
                             for x in access_lines(served)) for r, s in expected), 10, "every write's access line")
    m = scrape(served.url)
    for route, status in set(expected):
        n = sum(1 for r, s in expected if (r, s) == (route, status))
        assert sample(m, "upgate_requests_total", route=route, status=str(status), code="") == n, route
    assert not [x for x in access_lines(served) if account_id in x["route"]]  # routes, never paths

    assert stop(served.proc) == 0
    log = served.err.read_text()
    assert "Traceback" not in log and "AttributeError" not in log and "Uncaught" not in log, log


def test_a_get_on_a_write_route_is_405(served, redis_url):
    _key, account_id, key_id = seed(redis_url)
    c = signed_in(served, admin_token(redis_url))
    base = f"/admin/accounts/{account_id}"
    for path in (base + "/topups", base + "/adjustments", base + "/suspend", base + "/resume", base + "/keys",
                 f"{base}/keys/{key_id}/update", f"{base}/keys/{key_id}/revoke", "/admin/logout"):
        for client in (c, httpx.Client(base_url=served.url)):  # signed in, and not
            r = client.get(path)
            assert (r.status_code, r.headers.get("Allow")) == (405, "POST"), path
            assert "text/html" in r.headers["Content-Type"]
    assert c.get(base).status_code == 303  # the page itself still answers GET (with its own address)
    assert stop(served.proc) == 0
    assert "Traceback" not in served.err.read_text()
