"""Hostile input against a running node, over raw HTTP (http.client / sockets, so nothing is
tidied up on the way): it never crashes a handler, never changes state when it is refused,
and always gets the spec's error with X-Svc-Request-Id. A hypothesis suite fuzzes bodies and
headers; Redis state (wallet, key record, rpm window, holds, stream slots, free counter) is
compared before and after every request. Keys: one 401 body for every failure, and the full
key never reaches a log line or Redis.
"""
from __future__ import annotations

import os
import time

import httpx
import orjson
import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.gateway import seed
from tests.load_kit import HELLO, PROVIDER_KEY, Gateway, Raw, raw_bytes, raw_request, snapshot, sse_payloads
from upgate.services import keys
from upgate.store import keyspace

CANONICAL_401 = (b'{"error":{"message":"The API key is invalid, revoked or expired.",'
                 b'"type":"invalid_api_key","code":"invalid_api_key","param":null}}')
NO_MODEL = b'{"messages":[{"role":"user","content":"hi"}]}'  # refused after auth, before admit
CHAT = "/v1/chat/completions"
UPSTREAM_CODES = {"upstream_error", "upstream_unavailable", "upstream_timeout"}
ADMIT_REFUSALS = {"insufficient_balance", "key_monthly_limit_reached", "too_many_concurrent_streams",
                  "free_quota_exceeded"}


def _mock_requests(mock) -> int:
    return httpx.get(f"http://127.0.0.1:{mock.port}/_mock/stats").json()["requests"]


@pytest.fixture
def gw(make_node, redis_url, mock, tmp_path):
    """A node, a funded key (rpm 600 so the fuzz runs never hit it), a Redis client."""
    node = make_node(journal_path=str(tmp_path / "settle.journal"), upstream_silence_s=5.0)
    # these tests send hundreds of wrong keys from one address: past the failed-check throttle
    # (tested in test_auth_api.py) they would get 429s instead of the 401s they check
    node.ctx.auth.throttle.retry_after = lambda address: 0
    key, account_id, key_id = seed(redis_url, balance="1000", rpm=600)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    return node, key, account_id, key_id, r


def assert_error_shape(resp: Raw, status: int | None = None, code: str | None = None) -> None:
    assert resp.status is not None, "the connection closed without an answer"
    assert resp.headers.get("x-svc-request-id", "").startswith("req_"), resp.headers
    if status is not None:
        assert resp.status == status, (resp.status, resp.body[:300])
    if resp.status == 200:
        return
    err = orjson.loads(resp.body)["error"]
    assert set(err) <= {"message", "type", "code", "param", "svc"}
    assert err["type"] == err["code"] and err["param"] is None and isinstance(err["message"], str)
    if code is not None:
        assert err["code"] == code, err
    if resp.status == 401:
        assert resp.body == CANONICAL_401


def assert_state_change_allowed(before: dict, after: dict, resp: Raw) -> None:
    """What a request may change depends on how far it got."""
    assert resp.status is not None and resp.status != 500 and (resp.status < 500 or resp.status in (502, 503, 504))
    assert after["holds"] == [] and after["streams"] == [] and after["wallet"].get("held", "0") == "0"
    code = None if resp.status == 200 else orjson.loads(resp.body)["error"]["code"]
    if resp.status >= 500:
        assert code in UPSTREAM_CODES, code
    counted = resp.status == 200 or code in ADMIT_REFUSALS or code in UPSTREAM_CODES
    new = {m for m, _ in after["rpm"]} - {m for m, _ in before["rpm"]}
    dropped = {m for m, s in before["rpm"]} - {m for m, _ in after["rpm"]}
    assert not dropped or all(s < time.time() * 1000 - 59_000 for m, s in before["rpm"] if m in dropped)
    if not counted:  # refused before admit (or by rpm itself): nothing at all changed
        assert after == before, (resp.status, code)
        return
    assert len(new) == 1, (resp.status, code, new)
    if resp.status != 200:  # admitted or refused by admit, nothing served: no money moved
        assert after["wallet"] == before["wallet"] and after["key"] == before["key"], code
        return
    charged = int(before["wallet"]["balance"]) - int(after["wallet"]["balance"])
    month = [f for f in after["key"] if f.startswith("spent:")]
    delta = sum(int(after["key"][f]) - int(before["key"].get(f, 0)) for f in month)
    assert charged >= 0 and delta == charged


# ---- a table of hostile requests --------------------------------------------------------------------

def _body(**fields) -> bytes:
    base = {"model": "mock/chat-1", "messages": HELLO}
    base.update(fields)
    return orjson.dumps({k: v for k, v in base.items() if v is not ...})


def _lit(**literals) -> bytes:
    """A chat body with some fields given as raw JSON literals (1e2, 100.0, -0, 2**80 …)."""
    parts = ['"model":"mock/chat-1"', '"messages":[{"role":"user","content":"hi"}]']
    parts += [f'"{k}":{v}' for k, v in literals.items()]
    return ("{" + ",".join(parts) + "}").encode()


BAD = "bad"  # a placeholder for "some other well-formed key" in header cases
# name: (method, path, headers (KEY → the valid key), body, status, code)
HOSTILE = {
    # bodies
    "malformed-json": ("POST", CHAT, "auth", b'{"model": "mock/chat-1", ', 400, "invalid_request"),
    "empty-body": ("POST", CHAT, "auth", b"", 400, "invalid_request"),
    "json-array": ("POST", CHAT, "auth", b"[]", 400, "invalid_request"),
    "json-string": ("POST", CHAT, "auth", b'"model"', 400, "invalid_request"),
    "json-null": ("POST", CHAT, "auth", b"null", 400, "invalid_request"),
    "invalid-utf8": ("POST", CHAT, "auth", b'{"model":"mock/chat-1","messages":[{"role":"user","content":"\xff\xfe\xc3"}]}', 400, "invalid_request"),
    "lone-surrogate": ("POST", CHAT, "auth", b'{"model":"mock/chat-1","messages":[{"role":"user","content":"\\ud800"}]}', 400, "invalid_request"),
    "bom": ("POST", CHAT, "auth", b"\xef\xbb\xbf" + _body(), 400, "invalid_request"),
    "deep-nesting": ("POST", CHAT, "auth", b'{"model":"mock/chat-1","messages":[{"x":' + b"[" * 5000 + b"]" * 5000 + b"}]}", 400, "invalid_request"),
    "deep-nesting-object": ("POST", CHAT, "auth", b'{"a":' * 3000 + b"1" + b"}" * 3000, 400, "invalid_request"),
    "nan": ("POST", CHAT, "auth", _lit(max_tokens="NaN"), 400, "invalid_request"),
    "infinity": ("POST", CHAT, "auth", _lit(max_tokens="Infinity"), 400, "invalid_request"),
    "trailing-garbage": ("POST", CHAT, "auth", _body() + b"}", 400, "invalid_request"),
    "model-missing": ("POST", CHAT, "auth", _body(model=...), 400, "invalid_request"),
    "model-int": ("POST", CHAT, "auth", _body(model=1), 400, "invalid_request"),
    "model-list": ("POST", CHAT, "auth", _body(model=["mock/chat-1"]), 400, "invalid_request"),
    "model-empty": ("POST", CHAT, "auth", _body(model=""), 400, "invalid_request"),
    "model-uppercase": ("POST", CHAT, "auth", _body(model="Mock/Chat-1"), 404, "model_not_found"),
    "model-no-provider": ("POST", CHAT, "auth", _body(model="chat-1"), 404, "model_not_found"),
    "model-dotdot": ("POST", CHAT, "auth", _body(model="mock/../mock/chat-1"), 404, "model_not_found"),
    "model-nul": ("POST", CHAT, "auth", _body(model="mock/chat-1\u0000"), 404, "model_not_found"),
    "model-hidden": ("POST", CHAT, "auth", _body(model="mock/hidden"), 404, "model_not_found"),
    "model-huge": ("POST", CHAT, "auth", _body(model="mock/" + "x" * 1_000_000), 404, "model_not_found"),
    "messages-missing": ("POST", CHAT, "auth", _body(messages=...), 400, "invalid_request"),
    "messages-string": ("POST", CHAT, "auth", _body(messages="hi"), 400, "invalid_request"),
    "messages-empty": ("POST", CHAT, "auth", _body(messages=[]), 400, "invalid_request"),
    "messages-of-ints": ("POST", CHAT, "auth", _body(messages=[1, 2]), 400, "invalid_request"),
    "stream-string": ("POST", CHAT, "auth", _body(stream="true"), 400, "invalid_request"),
    "stream-int": ("POST", CHAT, "auth", _body(stream=1), 400, "invalid_request"),
    "max-tokens-string": ("POST", CHAT, "auth", _lit(max_tokens='"100"'), 400, "invalid_request"),
    "max-tokens-decimal": ("POST", CHAT, "auth", _lit(max_tokens="100.0"), 400, "invalid_request"),
    "max-tokens-exponent": ("POST", CHAT, "auth", _lit(max_tokens="1e2"), 400, "invalid_request"),
    "max-tokens-EXPONENT": ("POST", CHAT, "auth", _lit(max_tokens="1E+2"), 400, "invalid_request"),
    "max-tokens-bool": ("POST", CHAT, "auth", _lit(max_tokens="true"), 400, "invalid_request"),
    "max-tokens-negative": ("POST", CHAT, "auth", _lit(max_tokens="-1"), 400, "invalid_request"),
    "max-tokens-minus-zero": ("POST", CHAT, "auth", _lit(max_tokens="-0"), 400, "invalid_request"),
    "max-tokens-zero": ("POST", CHAT, "auth", _lit(max_tokens="0"), 400, "invalid_request"),
    "max-tokens-2^31": ("POST", CHAT, "auth", _lit(max_tokens=str(2**31)), 400, "invalid_request"),
    "max-tokens-2^63": ("POST", CHAT, "auth", _lit(max_tokens=str(2**63)), 400, "invalid_request"),
    "max-tokens-2^80": ("POST", CHAT, "auth", _lit(max_tokens=str(2**80)), 400, "invalid_request"),
    "max-tokens-1e400": ("POST", CHAT, "auth", _lit(max_tokens="1e400"), 400, "invalid_request"),
    "max-tokens-list": ("POST", CHAT, "auth", _lit(max_tokens="[5]"), 400, "invalid_request"),
    "max-completion-tokens-float": ("POST", CHAT, "auth", _lit(max_completion_tokens="5.5"), 400, "invalid_request"),
    "max-output-tokens-exp": ("POST", CHAT, "auth", _lit(max_output_tokens="5e0"), 400, "invalid_request"),
    "n-zero": ("POST", CHAT, "auth", _lit(n="0"), 400, "invalid_request"),
    "n-17": ("POST", CHAT, "auth", _lit(n="17"), 400, "invalid_request"),
    "n-decimal": ("POST", CHAT, "auth", _lit(n="2.0"), 400, "invalid_request"),
    "best-of-huge": ("POST", CHAT, "auth", _lit(best_of=str(10**30)), 400, "invalid_request"),
    "models-string": ("POST", CHAT, "auth", _body(models="mock/chat-1"), 400, "invalid_request"),
    "models-empty": ("POST", CHAT, "auth", _body(models=[]), 400, "invalid_request"),
    "models-ints": ("POST", CHAT, "auth", _body(models=[1]), 400, "invalid_request"),
    "models-too-many": ("POST", CHAT, "auth", _body(models=["mock/chat-1"] * 6), 400, "invalid_request"),
    "models-unknown": ("POST", CHAT, "auth", _body(models=["mock/chat-1", "nope/x"]), 404, "model_not_found"),
    "plugins-object": ("POST", CHAT, "auth", _body(plugins={"id": "web"}), 400, "invalid_request"),
    "plugins-strings": ("POST", CHAT, "auth", _body(plugins=["web"]), 400, "invalid_request"),
    "tools-object": ("POST", CHAT, "auth", _body(tools={}), 400, "invalid_request"),
    "response-format-list": ("POST", CHAT, "auth", _body(response_format=[]), 400, "invalid_request"),
    "reasoning-string": ("POST", CHAT, "auth", _body(reasoning="high"), 400, "invalid_request"),
    "embeddings-stream": ("POST", "/v1/embeddings", "auth", b'{"model":"mock/embed-1","input":"x","stream":true}', 400, "invalid_request"),
    "embeddings-of-chat-model": ("POST", "/v1/embeddings", "auth", b'{"model":"mock/chat-1","input":"x"}', 400, "invalid_request"),
    "embeddings-input-int": ("POST", "/v1/embeddings", "auth", b'{"model":"mock/embed-1","input":5}', 400, "invalid_request"),
    "chat-of-embed-model": ("POST", CHAT, "auth", _body(model="mock/embed-1"), 400, "invalid_request"),
    "completions-prompt-object": ("POST", "/v1/completions", "auth", b'{"model":"mock/chat-1","prompt":{}}', 400, "invalid_request"),
    # keys and headers
    "no-key": ("POST", CHAT, [], _body(), 401, "invalid_api_key"),
    "empty-bearer": ("POST", CHAT, [("Authorization", "Bearer ")], _body(), 401, "invalid_api_key"),
    "scheme-only": ("POST", CHAT, [("Authorization", "Bearer")], _body(), 401, "invalid_api_key"),
    "basic-scheme": ("POST", CHAT, [("Authorization", "Basic KEY")], _body(), 401, "invalid_api_key"),
    "no-scheme": ("POST", CHAT, [("Authorization", "KEY")], _body(), 401, "invalid_api_key"),
    "tab-separator": ("POST", CHAT, [("Authorization", "Bearer\tKEY")], _body(), 401, "invalid_api_key"),
    "key-plus-junk": ("POST", CHAT, [("Authorization", "Bearer KEY x")], _body(), 401, "invalid_api_key"),
    "key-comma": ("POST", CHAT, [("Authorization", "Bearer KEY,")], _body(), 401, "invalid_api_key"),
    "key-truncated": ("POST", CHAT, [("Authorization", "Bearer KEY[:-1]")], _body(), 401, "invalid_api_key"),
    "key-uppercased": ("POST", CHAT, [("Authorization", "Bearer KEY.upper()")], _body(), 401, "invalid_api_key"),
    "other-service-key": ("POST", CHAT, [("Authorization", "Bearer sk-proj-" + "a" * 40)], _body(), 401, "invalid_api_key"),
    "unknown-well-formed": ("POST", CHAT, [("Authorization", "Bearer BAD")], _body(), 401, "invalid_api_key"),
    "latin1-key": ("POST", CHAT, [("Authorization", "Bearer sk-up-" + "\u00e9" * 40)], _body(), 401, "invalid_api_key"),
    "duplicate-authorization": ("POST", CHAT, [("Authorization", "Bearer KEY"), ("Authorization", "Bearer KEY")], _body(), 401, "invalid_api_key"),
    "duplicate-authorization-mixed": ("POST", CHAT, [("Authorization", "Bearer BAD"), ("Authorization", "Bearer KEY")], _body(), 401, "invalid_api_key"),
    "duplicate-x-api-key": ("POST", CHAT, [("X-API-Key", "KEY"), ("X-API-Key", "KEY")], _body(), 401, "invalid_api_key"),
    "authorization-wins-over-x-api-key": ("POST", CHAT, [("Authorization", "Bearer BAD"), ("X-API-Key", "KEY")], _body(), 401, "invalid_api_key"),
    "empty-authorization-wins": ("POST", CHAT, [("Authorization", ""), ("X-API-Key", "KEY")], _body(), 401, "invalid_api_key"),
    "long-authorization-70k": ("POST", CHAT, [("Authorization", "Bearer " + "k" * 70_000)], _body(), 431, "request_header_too_large"),
    "long-x-api-key-300k": ("POST", CHAT, [("X-API-Key", "k" * 300_000)], _body(), 431, "request_header_too_large"),
    # header tricks that must still authenticate (the body then fails: nothing is admitted)
    "lowercase-bearer": ("POST", CHAT, [("Authorization", "bearer KEY")], NO_MODEL, 400, "invalid_request"),
    "uppercase-bearer": ("POST", CHAT, [("Authorization", "BEARER KEY")], NO_MODEL, 400, "invalid_request"),
    "whitespace-around": ("POST", CHAT, [("Authorization", "  Bearer    KEY   ")], NO_MODEL, 400, "invalid_request"),
    "x-api-key": ("POST", CHAT, [("X-API-Key", " KEY ")], NO_MODEL, 400, "invalid_request"),
    "authorization-wins-valid": ("POST", CHAT, [("Authorization", "Bearer KEY"), ("X-API-Key", "BAD")], NO_MODEL, 400, "invalid_request"),
    "long-junk-header-70k": ("POST", CHAT, [("Authorization", "Bearer KEY"), ("X-Junk", "j" * 70_000)], NO_MODEL, 431, "request_header_too_large"),
    "many-headers": ("POST", CHAT, [("Authorization", "Bearer KEY")] + [(f"X-H{i}", "v") for i in range(500)], NO_MODEL, 431, "request_header_too_large"),
    # paths
    "dotdot-path": ("POST", "/v1/../v1/chat/completions", "auth", _body(), 404, "not_found"),
    "encoded-dotdot": ("POST", "/v1/%2e%2e/v1/chat/completions", "auth", _body(), 404, "not_found"),
    "encoded-slash": ("POST", "/v1/chat%2Fcompletions", "auth", _body(), 404, "not_found"),
    "double-slash": ("POST", "//v1/chat/completions", "auth", _body(), 404, "not_found"),
    "trailing-slash": ("POST", "/v1/chat/completions/", "auth", _body(), 404, "not_found"),
    "upper-v1": ("POST", "/V1/chat/completions", "auth", _body(), 404, "not_found"),
    "no-version": ("POST", "/chat/completions", "auth", _body(), 404, "not_found"),
    "backslash": ("POST", "/v1\\chat\\completions", "auth", _body(), 404, "not_found"),
    "gone-route-dotdot": ("POST", "/v1/files/../chat/completions", "auth", _body(), 404, "not_found"),
    "responses": ("POST", "/v1/responses", "auth", _body(), 404, "not_found"),
    "model-id-dotdot": ("GET", "/v1/models/../svc/me", "auth", None, 404, "model_not_found"),
    "model-id-encoded-dotdot": ("GET", "/v1/models/..%2F..%2Fetc%2Fpasswd", [], None, 404, "model_not_found"),
    "model-id-invalid-utf8": ("GET", "/v1/models/%ff%fe", [], None, 400, "invalid_request"),
    "model-id-nul": ("GET", "/v1/models/mock%2Fchat-1%00", [], None, 404, "model_not_found"),
    "svc-me-dotdot": ("GET", "/v1/svc/me/../usage", "auth", None, 404, "not_found"),
    "usage-invalid-utf8-query": ("GET", "/v1/svc/usage?group_by=%ff", "auth", None, 400, "invalid_request"),
    "usage-bad-group": ("GET", "/v1/svc/usage?group_by=../../", "auth", None, 400, "invalid_request"),
    "usage-bad-date": ("GET", "/v1/svc/usage?from=9999-99-99", "auth", None, 400, "invalid_request"),
    "absolute-uri": ("GET", "http://evil.example/v1/models/..", [], None, 404, "not_found"),
    "asterisk": ("OPTIONS", "*", [], None, 404, "not_found"),
    # methods and sizes
    "get-chat": ("GET", CHAT, "auth", None, 405, "invalid_request"),
    "put-chat": ("PUT", CHAT, "auth", _body(), 405, "invalid_request"),
    "delete-me": ("DELETE", "/v1/svc/me", "auth", None, 405, "invalid_request"),
    "unknown-method": ("BREW", CHAT, "auth", _body(), 405, "invalid_request"),
    "content-length-huge": ("POST", CHAT, "auth+cl", None, 413, "request_too_large"),
    "content-length-words": ("POST", CHAT, "auth+badcl", None, 400, "invalid_request"),
}


def _headers(spec, key: str, other: str):
    if spec in ("auth", "auth+cl", "auth+badcl"):
        h = [("Authorization", f"Bearer {key}"), ("Content-Type", "application/json")]
        if spec == "auth+cl":
            h.append(("Content-Length", str(20 * 1024 * 1024 + 1)))
        if spec == "auth+badcl":
            h.append(("Content-Length", "twelve"))
        return h
    out = []
    for name, value in spec:
        value = (value.replace("KEY[:-1]", key[:-1]).replace("KEY.upper()", key.upper())
                 .replace("KEY", key).replace("BAD", other))
        out.append((name, value))
    return out


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_request_gets_its_spec_error_and_changes_nothing(case, gw, mock):
    node, key, account_id, key_id, r = gw
    method, path, spec, body, status, code = HOSTILE[case]
    other = keys.generate()  # well-formed, never issued
    before, seen = snapshot(r, account_id, key_id), _mock_requests(mock)
    resp = raw_request(node.port, method, path, _headers(spec, key, other), body)
    assert_error_shape(resp, status, code)
    assert snapshot(r, account_id, key_id) == before
    assert _mock_requests(mock) == seen
    if status == 401:  # the refusal says nothing about which check failed
        assert "x-ratelimit-remaining" not in resp.headers


def test_chunked_body_past_20_mb_is_413_and_the_node_keeps_serving(gw, mock):
    node, key, account_id, key_id, r = gw
    before, seen = snapshot(r, account_id, key_id), _mock_requests(mock)

    def body():
        yield b'{"model":"mock/chat-1","messages":[{"role":"user","content":"'
        for _ in range(21):
            yield b"a" * (1 << 20)
        yield b'"}]}'
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=60)
    try:
        conn.request("POST", CHAT, body=body(), encode_chunked=True,
                     headers={"Authorization": f"Bearer {key}", "Transfer-Encoding": "chunked"})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 413 and resp.getheader("X-Svc-Request-Id", "").startswith("req_")
        assert orjson.loads(data)["error"]["code"] == "request_too_large"
    finally:
        conn.close()
    assert snapshot(r, account_id, key_id) == before and _mock_requests(mock) == seen
    # a body just under the limit is read and judged on its content
    small = raw_request(node.port, "POST", CHAT, [("Authorization", f"Bearer {key}")],
                        b'{"messages":[{"role":"user","content":"' + b"a" * (19 << 20) + b'"}]}')
    assert_error_shape(small, 400, "invalid_request")
    ok = raw_request(node.port, "POST", CHAT, [("Authorization", f"Bearer {key}")], _body(max_tokens=2))
    assert ok.status == 200


def test_malformed_http_framing_is_refused_and_the_node_keeps_serving(gw, mock):
    """Framing errors are answered by the HTTP layer before any handler runs (a bare 400, so no
    request id: the only responses without one); headers past 64 KB get a 431. None of
    them reaches a handler, changes state, or disturbs the next request."""
    node, key, account_id, key_id, r = gw
    before, seen = snapshot(r, account_id, key_id), _mock_requests(mock)
    auth = f"Authorization: Bearer {key}\r\n".encode()
    frames = [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /v1/chat/completions HTTP/1.1\r\n" + auth + b"Content-Length: 2\r\n\r\n{}",  # no Host
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n" + auth + b"Content-Length: 2\r\n\r\n{}",
        b"GARBAGE\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"h" * (1 << 21) + b"\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\nHost: x\n" + auth + b"Content-Length: 2\n\n{}",  # bare LF
    ]
    for frame in frames:
        answer = raw_bytes(node.port, frame)
        assert answer == b"" or answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 431 ")), answer[:200]
    assert snapshot(r, account_id, key_id) == before and _mock_requests(mock) == seen
    ok = raw_request(node.port, "POST", CHAT, [("Authorization", f"Bearer {key}")], _body(max_tokens=2))
    assert ok.status == 200


# ---- 401: one body for every failure ------------------------------------------------------------------

def test_401_is_byte_identical_for_every_failure_kind(gw, redis_url):
    node, key, account_id, key_id, r = gw
    client = redis.Redis.from_url(redis_url)
    revoked, _, revoked_id = seed(redis_url, balance="10", phone="09120000001")
    expired, exp_account, expired_id = seed(redis_url, balance="10", phone="09120000002")
    works = raw_request(node.port, "POST", CHAT, [("Authorization", f"Bearer {revoked}")], NO_MODEL)
    assert works.status == 400  # the key works (and is now cached) until revoked
    keys.revoke_key(client, revoked_id)
    client.hset(keyspace.key_record(exp_account, expired_id), "expires_at", int(time.time() * 1000) - 1000)
    credentials = {
        "missing": [],
        "empty": [("Authorization", "")],
        "wrong-scheme": [("Authorization", f"Token {key}")],
        "malformed": [("Authorization", "Bearer sk-up-short")],
        "unknown": [("Authorization", f"Bearer {keys.generate()}")],
        "revoked": [("Authorization", f"Bearer {revoked}")],
        "revoked-x-api-key": [("X-API-Key", revoked)],
        "expired": [("Authorization", f"Bearer {expired}")],
        "other-service": [("X-API-Key", "sk-or-v1-" + "0" * 64)],
        "two-keys": [("Authorization", f"Bearer {revoked}"), ("X-API-Key", key)],
    }
    routes = [("POST", CHAT, _body()), ("POST", "/v1/embeddings", b'{"model":"mock/embed-1","input":"x"}'),
              ("POST", "/v1/completions", b'{"model":"mock/chat-1","prompt":"x"}'),
              ("GET", "/v1/svc/me", None), ("GET", "/v1/svc/usage", None)]
    shapes = set()
    for name, headers in credentials.items():
        for method, path, body in routes:
            resp = raw_request(node.port, method, path, headers, body)
            assert resp.status == 401 and resp.body == CANONICAL_401, (name, path, resp.status, resp.body)
            assert resp.headers["x-svc-request-id"].startswith("req_")
            shapes.add(tuple(sorted((k, v) for k, v in resp.headers.items()
                                    if k not in ("x-svc-request-id", "x-request-id", "date"))))
    assert len(shapes) == 1, shapes  # the headers say nothing either (no rate-limit headers)


def test_full_key_never_reaches_logs_or_redis(redis_url, make_node, mock, tmp_path):
    """A real `upgate serve` process at DEBUG log level: every request kind, errors included,
    with keys in headers, the path and the query. Its stdout (access log) and stderr, the
    journal directory and every value in Redis are searched for the full keys; the logs also
    for the prompt, the answer and the operator's provider key."""
    make_node()  # loads the catalog
    key, account_id, key_id = seed(redis_url, balance="100000")
    revoked, _, revoked_id = seed(redis_url, balance="10", phone="09120000003")
    unknown = keys.generate()
    g = Gateway(redis_url, mock.base_url, tmp_path, "logged", UPGATE_LOG_LEVEL="DEBUG")
    try:
        g.wait_ready()
        h = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=g.base, timeout=30) as c:
            assert c.post("/chat/completions", json={"model": "mock/chat-1", "messages": HELLO}, headers=h).status_code == 200
            assert c.post("/chat/completions", json={"model": "mock/chat-1", "messages": HELLO, "stream": True},
                          headers={"X-API-Key": key}).status_code == 200
            assert c.post("/embeddings", json={"model": "mock/embed-1", "input": "x"}, headers=h).status_code == 200
            assert c.post("/chat/completions", json={"model": "mock/chat-1", "messages": HELLO,
                                                     "mock": {"status": 500}}, headers=h).status_code == 502
            assert c.post("/chat/completions", content=b"{oops", headers=h).status_code == 400
            assert c.get("/svc/me", headers=h).status_code == 200
            assert c.post("/chat/completions", json={}, headers={"Authorization": f"Bearer {unknown}"}).status_code == 401
            keys.revoke_key(redis.Redis.from_url(redis_url), revoked_id)
            assert c.get("/svc/me", headers={"Authorization": f"Bearer {revoked}"}).status_code == 401
            assert c.get(f"/models/{key}").status_code == 404
            assert c.get(f"/{key}").status_code == 404
            assert c.get(f"/svc/usage?api_key={key}&group_by={key}", headers=h).status_code == 400
        assert raw_request(g.port, "GET", f"/v1/models/{key}%ff").status == 400
        assert raw_request(g.port, "POST", CHAT, [("Authorization", f"Bearer {key}"), ("Authorization", f"Bearer {key}")],
                           b"{}").status == 401
        assert raw_bytes(g.port, f"POST /v1/x HTTP/1.1\r\nAuthorization: Bearer {key}\r\n\r\n".encode()).startswith(b"HTTP/1.1 400")
    finally:
        g.stop()
    logs = g.logs()
    assert b'"status":200' in logs and b"upgate" in logs  # the logs were captured at all
    files = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.suffix == ".toml")
    r = redis.Redis.from_url(redis_url)
    stored = _everything_in(r)
    for secret in (key, revoked, unknown):
        body = secret[len("sk-up-"):]
        assert body.encode() not in logs, "a full key reached the gateway's logs"
        assert body.encode() not in files
        assert body.encode() not in stored, "a full key reached Redis"
    assert key[:10].encode() in logs  # the display prefix is how logs name a key
    for content in (b"Hello there", b"tok0", PROVIDER_KEY.encode()):
        assert content not in logs, f"{content!r} reached the gateway's logs"


def _everything_in(r) -> bytes:
    out = []
    for name in r.scan_iter(count=1000):
        out.append(name)
        kind = r.type(name)
        if kind == b"string":
            out.append(r.get(name) or b"")
        elif kind == b"hash":
            for k, v in r.hgetall(name).items():
                out += [k, v]
        elif kind == b"set":
            out += list(r.smembers(name))
        elif kind == b"zset":
            out += [m for m, _ in r.zrange(name, 0, -1, withscores=True)]
        elif kind == b"list":
            out += r.lrange(name, 0, -1)
    return b"\n".join(out)


# ---- hypothesis: bodies and headers --------------------------------------------------------------------

_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["100.0", "1e2", "1E2", "1e+2", "-0", "0", "1", "2", "16", "17", "2147483647",
                     "2147483648", "1.5", "-1", "true", "false", "null", '"100"', '""', "[]", "{}",
                     "NaN", "Infinity", "-Infinity", "1e400", "0x10", "01", "+1", ".5", "5.", "1e",
                     "9" * 400]),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: orjson.dumps(f).decode()),
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
).map(lambda v: orjson.dumps(v).decode())
_MODELS = st.sampled_from(['"mock/chat-1"', '"mock/chat-1"', '"mock/chat-big"', '"mock/chat-1:free"',
                           '"mock/chat-1:online"', '"mock/embed-1"', '"mock/hidden"', '"dead/chat"',
                           '"Mock/Chat-1"', '"chat-1"', '"nope/x"', '""', "1", "null", '["mock/chat-1"]',
                           '"mock/chat-1\\u0000"', '"mock/chat-1:free:free"']) | _JSON
_MESSAGES = st.sampled_from([
    '[{"role":"user","content":"hi"}]', '[{"role":"user","content":"hi"}]', "[]", '"hi"', "[1]", "[{}]",
    '[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:x"}}]}]',
    '[{"role":"user","content":null}]', '[{"role":"user","content":{"nested":[[[[1]]]]}}]', "null",
]) | _JSON
_FIELD_VALUES = {
    "model": _MODELS, "messages": _MESSAGES,
    "stream": st.sampled_from(["true", "false", "null", '"true"', "1", "0"]),
    "max_tokens": _NUMBERS, "max_completion_tokens": _NUMBERS, "max_output_tokens": _NUMBERS,
    "n": _NUMBERS, "best_of": _NUMBERS,
    "models": st.sampled_from(['["mock/chat-1"]', '["mock/chat-big","mock/chat-1"]', '[]', '"mock/chat-1"',
                               '["nope/x"]', "[1]", '["mock/chat-1:free"]']) | _JSON,
    "plugins": st.sampled_from(['[{"id":"web"}]', '["web"]', "{}", "[]", "null"]) | _JSON,
    "reasoning": st.sampled_from(['{"max_tokens":5}', '{"max_tokens":1e9}', '"high"', "{}"]) | _JSON,
    "tools": _JSON, "response_format": _JSON, "provider": _JSON, "web_search_options": _JSON,
    "transforms": _JSON, "input": _JSON, "prompt": _JSON, "usage": _JSON, "stream_options": _JSON,
}


_VALID = {  # a body each route accepts: the fuzz perturbs it, so most examples get past parsing
    "/v1/chat/completions": {"model": '"mock/chat-1"', "messages": '[{"role":"user","content":"hi"}]', "max_tokens": "5"},
    "/v1/completions": {"model": '"mock/chat-1"', "prompt": '"hi"', "max_tokens": "5"},
    "/v1/embeddings": {"model": '"mock/embed-1"', "input": '"hi"'},
}


@st.composite
def bodies(draw, route: str) -> bytes:
    fields = dict(_VALID[route]) if draw(st.integers(0, 4)) else {}
    for name in draw(st.lists(st.sampled_from(sorted(_FIELD_VALUES)), unique=True, max_size=3)):
        if draw(st.integers(0, 5)) == 0:
            fields.pop(name, None)
        else:
            fields[name] = draw(_FIELD_VALUES[name])
    for extra in draw(st.lists(st.text(max_size=10), max_size=2)):
        if extra != "mock":  # the mock's own fault switches stay out of the fuzz
            fields[extra] = draw(_JSON)
    text = "{" + ",".join(orjson.dumps(k).decode() + ":" + v for k, v in fields.items()) + "}"
    raw = text.encode()
    mutation = draw(st.sampled_from(["none"] * 7 + ["truncate", "insert", "flip"]))
    if mutation != "none" and raw:
        at = draw(st.integers(0, len(raw) - 1))
        if mutation == "truncate":
            raw = raw[:at]
        elif mutation == "insert":
            raw = raw[:at] + draw(st.binary(min_size=1, max_size=4)) + raw[at:]
        else:
            raw = raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1:]
    return raw


# bounded for CI; UPGATE_FUZZ_EXAMPLES=5000 for a long exploratory run
FUZZ = settings(max_examples=int(os.environ.get("UPGATE_FUZZ_EXAMPLES", "150")), deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


@FUZZ
@given(data=st.data(), meta=st.booleans())
def test_fuzzed_bodies_never_crash_and_refusals_change_nothing(gw, data, meta):
    node, key, account_id, key_id, r = gw
    route = data.draw(st.sampled_from(["/v1/chat/completions"] * 3 + ["/v1/completions", "/v1/embeddings"]), label="route")
    body = data.draw(bodies(route), label="body")
    before = snapshot(r, account_id, key_id)
    headers = [("Authorization", f"Bearer {key}"), ("Content-Type", "application/json")]
    if meta:
        headers.append(("X-Svc-Include-Meta", "1"))
    resp = raw_request(node.port, "POST", route, headers, body)
    assert_error_shape(resp)
    event(f"{resp.status} {resp.code or ''}")
    assert_state_change_allowed(before, snapshot(r, account_id, key_id), resp)
    if resp.status == 200 and resp.headers.get("content-type") == "text/event-stream":
        payloads = sse_payloads(resp.body.decode())
        assert payloads[-1] == "[DONE]" or payloads[-1].get("error"), payloads[-1:]


_HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=60)
_SCHEMES = st.sampled_from(["Bearer", "bearer", "BEARER", "BeArEr", "Basic", "Token", "", "Bearer:", "Bearer,"])
_SEPARATORS = st.sampled_from([" ", "  ", "\t", "", " \t "])


@st.composite
def credentials(draw, key: str, other: str) -> str:
    value = draw(st.one_of(st.just(key), st.just(key), _HEADER_TEXT, st.sampled_from(
        [other, key[:-1], key + "x", key.upper(), " " + key, key + " ", key + "," + key, "sk-up-",
         "sk-proj-" + key[6:], ""])))
    scheme = draw(st.one_of(st.just("Bearer"), st.just("bearer"), _SCHEMES))
    separator = draw(st.one_of(st.just(" "), _SEPARATORS))
    return scheme + separator + value + draw(st.sampled_from(["", " ", "  "]))


@FUZZ
@given(data=st.data())
def test_fuzzed_headers_never_let_a_wrong_key_in(gw, data):
    node, key, account_id, key_id, r = gw
    other = "sk-up-" + "A" * 40  # well formed, never issued
    headers = []
    for _ in range(data.draw(st.sampled_from([0, 1, 1, 1, 2]), label="authorization headers")):
        headers.append(("Authorization", data.draw(credentials(key, other), label="authorization")))
    for _ in range(data.draw(st.integers(0, 2), label="x-api-key headers")):
        headers.append(("X-API-Key", data.draw(st.sampled_from([key, key, other, " " + key + " ", ""]) | _HEADER_TEXT,
                                               label="x-api-key")))
    junk = data.draw(st.lists(st.tuples(st.from_regex(r"X-[A-Za-z0-9-]{1,20}", fullmatch=True),
                                        _HEADER_TEXT | st.just("v" * 70_000)), max_size=4), label="junk")
    headers += [(n, v) for n, v in junk if n.lower() not in ("x-api-key",)]
    before = snapshot(r, account_id, key_id)
    resp = raw_request(node.port, "POST", CHAT, headers, NO_MODEL)
    assert_error_shape(resp)
    event(str(resp.status))
    assert resp.status in (400, 401, 431), (resp.status, resp.body[:200])
    assert snapshot(r, account_id, key_id) == before
    if resp.status == 431:  # a header block past 64 KB: refused before any key is looked at
        return
    auths = [v for n, v in headers if n == "Authorization"]
    api_keys = [v for n, v in headers if n == "X-API-Key"]
    if resp.status == 400:  # authenticated: the one credential that counts is exactly our key
        assert orjson.loads(resp.body)["error"]["code"] == "invalid_request"
        if auths:
            assert len(auths) == 1 and auths[0].split()[-1] == key and auths[0].split()[0].lower() == "bearer"
        else:
            assert len(api_keys) == 1 and api_keys[0].strip() == key
    exact = [v for v in auths] == [f"Bearer {key}"] or (not auths and api_keys == [key])
    if exact:
        assert resp.status == 400, "the right key, sent the documented way, was refused"
