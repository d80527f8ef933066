"""A provider that speaks the Responses API and answers malformed (fields of the wrong type: an
`output` that is no list, an `incomplete_details` that is text, a call's id that is a list): the
client gets the provider's failure (502 upstream_error) or what it could read of the answer,
never a 500, and no hold is left. Before, each was a TypeError or AttributeError in the gateway:
a 500 for an answer, and a 502 losing the whole stream for an event."""
from __future__ import annotations

import http.server
import threading

import httpx
import orjson
import pytest

from tests import gateway
from tests.gateway import CATALOG, Node, seed
from tests.responses.conftest import NATIVE
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.store import connection as store
from upgate.upstream.providers import Provider

ANSWERS = {
    "output a number": {"id": "r", "status": "completed", "output": 5},
    "details text": {"id": "r", "status": "incomplete", "incomplete_details": "max", "output": []},
    "call id a list": {"id": "r", "status": "completed", "output": [
        {"type": "function_call", "call_id": ["c"], "name": ["f"], "arguments": "{}"}]},
}
EVENTS = {
    "details text": [{"type": "response.created", "response": {"id": "r"}},
                     {"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": "x"}}],
    "item id a list": [{"type": "response.created", "response": {"id": "r"}},
                       {"type": "response.output_item.added", "item": {"type": "function_call", "id": ["i"]}},
                       {"type": "response.function_call_arguments.delta", "item_id": ["i"], "delta": "{}"},
                       {"type": "response.completed", "response": {"status": "completed"}}],
}


class _Fake(http.server.BaseHTTPRequestHandler):
    answer: bytes = b""
    stream = False

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if self.server.stream else "application/json")
        self.send_header("Content-Length", str(len(self.server.answer)))
        self.end_headers()
        self.wfile.write(self.server.answer)

    def log_message(self, *a):
        pass


@pytest.fixture
def fake():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


@pytest.fixture
def native_node(redis_url, fake):
    catalog_store.store(store.connect_sync(redis_url), catalog.parse(CATALOG.read_text() + NATIVE,
                                                                     {"mock", "dead", "native"}))
    native = Provider(name="native", base_url=f"http://127.0.0.1:{fake.server_port}/v1", api_key="x",
                      dialect="openai", available=True, responses=True)
    node = Node(gateway.test_settings(redis_url, responses=True), {"native": native})
    yield node
    node.close()


def _held(redis_url, account_id) -> str:
    from upgate.store import keyspace
    return store.text(store.connect_sync(redis_url).hget(keyspace.wallet(account_id), "held") or b"0")


@pytest.mark.parametrize("name", ANSWERS)
def test_a_malformed_answer_is_the_providers_failure(native_node, fake, redis_url, name):
    key, acct, _ = seed(redis_url, balance="100000")
    fake.stream, fake.answer = False, orjson.dumps(ANSWERS[name])
    r = httpx.post(native_node.base + "/responses", headers={"Authorization": f"Bearer {key}"},
                   json={"model": "native/resp-1", "input": "hi"}, timeout=30)
    assert r.status_code < 500 or r.json()["error"]["code"] == "upstream_error", (name, r.status_code, r.text)
    assert r.status_code != 500, (name, r.text)
    assert _held(redis_url, acct) == "0"


@pytest.mark.parametrize("name", EVENTS)
def test_a_malformed_event_field_loses_nothing_else(native_node, fake, redis_url, name):
    key, acct, _ = seed(redis_url, balance="100000")
    fake.stream = True
    fake.answer = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in EVENTS[name])
    r = httpx.post(native_node.base + "/responses", headers={"Authorization": f"Bearer {key}"},
                   json={"model": "native/resp-1", "input": "hi", "stream": True}, timeout=30)
    # what the provider did send reaches the client (a wrong-typed field lost the whole stream: 502)
    assert r.status_code == 200, (name, r.status_code, r.text)
    assert "event: response.completed" in r.text or "event: response.incomplete" in r.text, (name, r.text)
    assert _held(redis_url, acct) == "0"
