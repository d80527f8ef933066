"""x-request-id: every response carries the X-Svc-Request-Id value there too, because the SDKs
read that header (openai-python's `response._request_id` and `err.request_id`)."""
from __future__ import annotations

import http.client

import openai
import pytest

from tests.gateway import seed

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]


def _ids(resp) -> tuple[str, str]:
    return resp.getheader("X-Svc-Request-Id"), resp.getheader("x-request-id")


def test_the_openai_client_reads_our_request_id(node, redis_url):
    key, _, _ = seed(redis_url, balance="100000")
    c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
    raw = c.chat.completions.with_raw_response.create(model="mock/chat-1", messages=HELLO)
    rid = raw.headers["X-Svc-Request-Id"]
    assert rid.startswith("req_")
    assert raw.parse()._request_id == rid
    stream = c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True)
    assert stream.response.headers["x-request-id"] == stream.response.headers["X-Svc-Request-Id"]
    assert [ch for ch in stream]
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="mock/no-such-model", messages=HELLO)
    assert e.value.request_id and e.value.request_id == e.value.response.headers["X-Svc-Request-Id"]
    with pytest.raises(openai.AuthenticationError) as e:
        openai.OpenAI(base_url=node.base, api_key="sk-wrong", max_retries=0).chat.completions.create(
            model="mock/chat-1", messages=HELLO)
    assert e.value.request_id.startswith("req_")


@pytest.mark.parametrize("method,path,headers,body,status", [
    ("GET", "/v1/no-such-route", {}, None, 404),
    ("DELETE", "/nowhere", {}, None, 404),
    ("POST", "/v1/chat/completions", {"Authorization": "Bearer sk-wrong"}, b"{}", 401),
    ("POST", "/v1/chat/completions", {"Content-Length": str(21 * 1024 * 1024)}, None, 401),  # the key first
    ("GET", "/v1/models", {}, None, 200),
])
def test_every_response_carries_the_same_id_twice(node, method, path, headers, body, status):
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10)
    try:
        conn.putrequest(method, path)
        for name, value in headers.items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()
    assert resp.status == status
    svc, sdk = _ids(resp)
    assert svc and svc.startswith("req_") and sdk == svc
