"""count_tokens counts in the key's rpm window (DESIGN.md "Agent clients"; issue 36: 90 calls
in a minute on an rpm-60 key all got 200): the same X-RateLimit-* headers and the same 429 as
/v1/messages, one window for both."""
from __future__ import annotations

import httpx

from tests.gateway import seed

BODY = {"model": "mock/chat-1", "messages": [{"role": "user", "content": "Hello"}]}


def _h(key: str) -> dict:
    return {"x-api-key": key, "anthropic-version": "2023-06-01"}


def test_count_tokens_is_counted_and_limited_like_messages(node, redis_url):
    key, _, _ = seed(redis_url, balance="1000", rpm=5)
    seen = []
    for _ in range(4):
        r = httpx.post(node.base + "/messages/count_tokens", json=BODY, headers=_h(key), timeout=30)
        assert r.status_code == 200 and r.json()["input_tokens"] > 0
        seen.append(int(r.headers["X-RateLimit-Remaining"]))
        assert r.headers["X-RateLimit-Limit"] == "5"
    assert seen == [4, 3, 2, 1]
    served = httpx.post(node.base + "/messages", json={**BODY, "max_tokens": 8}, headers=_h(key), timeout=30)
    assert served.status_code == 200 and served.headers["X-RateLimit-Remaining"] == "0"
    for path in ("/messages/count_tokens", "/messages"):
        r = httpx.post(node.base + path, json={**BODY, "max_tokens": 8}, headers=_h(key), timeout=30)
        assert r.status_code == 429, (path, r.text)
        assert r.json()["error"]["type"] == "rate_limit_error" and int(r.headers["Retry-After"]) >= 1
        assert r.headers["X-RateLimit-Remaining"] == "0"


def test_a_flood_of_count_tokens_is_refused_past_the_key_s_rpm(node, redis_url):
    key, _, _ = seed(redis_url, balance="1000", rpm=60)
    with httpx.Client(base_url=node.base, headers=_h(key), timeout=30) as c:
        codes = [c.post("/messages/count_tokens", json=BODY).status_code for _ in range(90)]
    assert codes.count(200) == 60 and codes.count(429) == 30, codes
