"""The proxy end to end: the real `openai` client → a running gateway node → the mock provider,
with billing on a private real Redis. Money is checked to the micro-toman."""
from __future__ import annotations

import asyncio
import http.client
import socket
import time
from decimal import Decimal

import httpx
import openai
import orjson
import pytest
import redis

from tests.gateway import seed
from upgate.billing import sizing
from upgate.store import keyspace

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]  # 21 chars → mock prompt_tokens 5
PRICES = {"mock/chat-1": (150_000, 600_000), "mock/chat-big": (1_000_000, 4_000_000)}


def cost(model: str, prompt: int, completion: int) -> int:
    p, c = PRICES[model]
    return prompt * p + completion * c + (10_000_000 if model == "mock/chat-big" else 0)


def client(node, key, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=node.base, api_key=key, max_retries=0, **kw)


def wallet(redis_url, account_id) -> dict:
    raw = redis.Redis.from_url(redis_url, decode_responses=True).hgetall(keyspace.wallet(account_id))
    return {"balance": int(raw["balance"]), "held": int(raw.get("held", 0))}


def me(node, key) -> dict:
    return httpx.get(node.base + "/svc/me", headers={"X-API-Key": key}).json()


def mock_stats(mock) -> dict:
    return httpx.get(f"http://127.0.0.1:{mock.port}/_mock/stats").json()


@pytest.fixture
def funded(redis_url):
    return seed(redis_url, balance="100000")


def test_chat_non_stream_charges_exactly_the_real_usage(node, redis_url, funded):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    resp = client(node, key).chat.completions.with_raw_response.create(model="mock/chat-1", messages=HELLO)
    out = resp.parse()
    assert out.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4 "
    assert out.model == "mock/chat-1"
    assert out.model_extra["provider"]
    assert out.usage.prompt_tokens == 5 and out.usage.completion_tokens == 5
    for h in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-Svc-Request-Id"):
        assert h in resp.headers
    assert resp.headers["X-RateLimit-Remaining"] == "59"
    after = wallet(redis_url, account_id)
    assert before["balance"] - after["balance"] == cost("mock/chat-1", 5, 5) == 3_750_000
    assert after["held"] == 0
    state = me(node, key)
    assert state["key"]["spent_this_month_toman"] == "3.750000"
    assert state["wallet"]["held_toman"] == "0.000000"


def test_stream_relays_chunks_and_settles_before_done(node, redis_url, funded):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    stream = client(node, key).chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 tok4 "
    assert all(c.choices for c in chunks), "a usage-only chunk reached a client that did not ask for it"
    assert before["balance"] - wallet(redis_url, account_id)["balance"] == 3_750_000


def test_stream_usage_chunk_and_meta_when_asked(node, redis_url, funded):
    key, account_id, _ = funded
    c = client(node, key, default_headers={"X-Svc-Include-Meta": "1"})
    chunks = list(c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True,
                                            stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.usage.completion_tokens == 5
    svc = last.model_extra["svc"]
    assert svc["cost_toman"] == "3.750000" and svc["model"] == "mock/chat-1"
    assert svc["request_id"].startswith("req_")
    assert Decimal(svc["hold_toman"]) > Decimal(svc["cost_toman"])


def test_non_stream_meta(node, funded):
    key, _, _ = funded
    c = client(node, key, default_headers={"X-Svc-Include-Meta": "1"})
    out = c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    assert out.model_extra["svc"]["cost_toman"] == "3.750000"


def test_async_client_and_parallel_requests(node, redis_url, funded):
    key, account_id, _ = funded

    async def run():
        c = openai.AsyncOpenAI(base_url=node.base, api_key=key, max_retries=0)
        outs = await asyncio.gather(*[c.chat.completions.create(model="mock/chat-1", messages=HELLO)
                                      for _ in range(10)])
        await c.close()
        return outs

    outs = asyncio.run(run())
    assert all(o.choices[0].message.content for o in outs)
    w = wallet(redis_url, account_id)
    assert w["balance"] == 100_000_000_000 - 10 * 3_750_000 and w["held"] == 0


def test_tools_and_unknown_fields_pass_through(node, mock, funded):
    key, _, _ = funded
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    out = client(node, key).chat.completions.create(
        model="mock/chat-1", messages=HELLO, tools=tools, response_format={"type": "json_object"},
        extra_body={"mock": {"tool_calls": True}, "transforms": ["middle-out"], "custom_field": 7,
                    "provider": {"order": ["x"], "allow_fallbacks": False}})
    assert out.choices[0].message.tool_calls[0].function.name == "get_weather"
    sent = mock_stats(mock)["last_body"]
    assert sent["model"] == "mock-chat-1"  # the upstream model
    assert sent["tools"] == tools and sent["custom_field"] == 7 and sent["transforms"] == ["middle-out"]
    assert sent["provider"] == {"order": ["x"], "allow_fallbacks": False}
    assert sent["response_format"] == {"type": "json_object"}


def test_embeddings_and_legacy_completions(node, redis_url, funded):
    key, account_id, _ = funded
    c = client(node, key)
    before = wallet(redis_url, account_id)["balance"]
    emb = c.embeddings.create(model="mock/embed-1", input="hello world, embed me")
    assert len(emb.data[0].embedding) > 0
    charged = before - wallet(redis_url, account_id)["balance"]
    assert charged == emb.usage.prompt_tokens * 20_000
    done = c.completions.create(model="mock/chat-1", prompt="Say hi", max_tokens=3)
    assert done.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model="mock/chat-1", input="x")
    assert e.value.code == "invalid_request"
    with pytest.raises(openai.BadRequestError):
        c.completions.create(model="mock/embed-1", prompt="x")


def test_error_statuses_surface_as_the_clients_exception_classes(node, redis_url):
    key, account_id, _ = seed(redis_url, balance="0.001", allowed_models=["mock/chat-1", "mock/chat-big"])
    c = client(node, key)
    cases = [
        (openai.NotFoundError, "model_not_found", {"model": "nope/none"}),
        (openai.NotFoundError, "model_not_found", {"model": "Mock/Chat-1"}),
        (openai.NotFoundError, "model_not_found", {"model": "chat-1"}),
        (openai.NotFoundError, "model_not_found", {"model": "mock/hidden"}),
        (openai.PermissionDeniedError, "model_not_allowed", {"model": "mock/chat-1:online"}),
        (openai.PermissionDeniedError, "model_not_allowed", {"model": "mock/chat-1", "extra_body": {"models": ["mock/chat-1:free"]}}),
        (openai.APIStatusError, "insufficient_balance", {"model": "mock/chat-1"}),
        (openai.BadRequestError, "invalid_request", {"model": "mock/chat-1", "max_tokens": "100"}),
    ]
    for exc, code, kw in cases:
        with pytest.raises(exc) as e:
            c.chat.completions.create(messages=HELLO, **kw)
        assert e.value.code == code, (kw, e.value)
        assert e.value.response.headers["x-should-retry"] == "false"
        assert "X-RateLimit-Limit" in e.value.response.headers
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    assert e.value.status_code == 402
    svc = e.value.body["svc"]
    assert svc["balance_toman"] == "0.001000" and svc["available_toman"] == "0.001000"
    assert Decimal(svc["required_toman"]) > Decimal("0.001") and svc["topup_url"]
    with pytest.raises(openai.AuthenticationError) as e:
        client(node, "sk-up-" + "z" * 40).chat.completions.create(model="mock/chat-1", messages=HELLO)
    assert e.value.code == "invalid_api_key"
    assert wallet(redis_url, account_id) == {"balance": 1000, "held": 0}


@pytest.mark.parametrize("raw", ['"100"', "100.0", "1e2", "true"])
def test_integer_fields_over_http(node, funded, raw):
    key, _, _ = funded
    body = '{"model": "mock/chat-1", "messages": [{"role": "user", "content": "x"}], "max_tokens": %s}' % raw
    resp = httpx.post(node.base + "/chat/completions", content=body,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request"


def test_rate_limit_and_concurrent_stream_cap(node, redis_url):
    key, _, _ = seed(redis_url, rpm=2, balance="100000")
    c = client(node, key)
    c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    with pytest.raises(openai.RateLimitError) as e:
        c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    assert e.value.code == "rate_limit_exceeded"
    h = e.value.response.headers
    assert h["X-RateLimit-Remaining"] == "0" and 0 < int(h["Retry-After"]) <= 60


def test_upstream_errors_release_the_hold_and_scrub_the_message(node, redis_url, funded):
    key, account_id, _ = funded
    c = client(node, key)
    with pytest.raises(openai.InternalServerError) as e:
        c.chat.completions.create(model="mock/chat-1", messages=HELLO, extra_body={"mock": {"status": 500}})
    assert e.value.status_code == 502 and e.value.code == "upstream_error"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="mock/chat-1", messages=HELLO, extra_body={"mock": {"status": 400}})
    msg = e.value.message
    assert e.value.code == "invalid_request"
    assert "127.0.0.1" not in msg and "sk-mock-SECRET123" not in msg and "org-mockorg" not in msg
    with pytest.raises(openai.InternalServerError):
        c.chat.completions.create(model="mock/chat-1", messages=HELLO, extra_body={"mock": {"garbage": True}})
    assert wallet(redis_url, account_id) == {"balance": 100_000_000_000, "held": 0}


def test_three_upstream_429s_make_the_model_cold(node, mock, redis_url, funded):
    key, _, _ = funded
    c = client(node, key)
    for _ in range(3):
        with pytest.raises(openai.RateLimitError) as e:
            c.chat.completions.create(model="mock/chat-big", messages=HELLO, extra_body={"mock": {"status": 429}})
        assert e.value.code == "upstream_rate_limited"
    seen = mock_stats(mock)["requests"]
    deadline = time.time() + 5
    while not node.ctx.ledger.cold_until("mock/chat-big") and time.time() < deadline:
        time.sleep(0.02)
    with pytest.raises(openai.RateLimitError) as e:
        c.chat.completions.create(model="mock/chat-big", messages=HELLO)
    assert e.value.code == "upstream_rate_limited"
    assert 0 < int(e.value.response.headers["Retry-After"]) <= 30
    assert mock_stats(mock)["requests"] == seen  # a cold model does not go upstream
    c.chat.completions.create(model="mock/chat-1", messages=HELLO)  # other models are unaffected


def test_cut_stream_is_charged_only_for_what_arrived(node, redis_url, funded):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)["balance"]
    got = []
    with pytest.raises(openai.APIError):
        for chunk in client(node, key).chat.completions.create(
                model="mock/chat-1", messages=HELLO, stream=True, extra_body={"mock": {"chunks": 20, "cut_after": 3}}):
            got.append(chunk.choices[0].delta.content)
    assert "".join(g or "" for g in got) == "tok0 tok1 tok2 "
    charged = before - wallet(redis_url, account_id)["balance"]
    body = {"model": "mock/chat-1", "messages": HELLO}
    expected = sizing.cost_micro(node.ctx.catalog.resolve("mock/chat-1"), sizing.prompt_tokens(body), 4, False)
    assert charged == expected
    assert 0 < charged < cost("mock/chat-1", 5, 20)
    assert wallet(redis_url, account_id)["held"] == 0


def test_client_disconnect_frees_the_slot_and_settles_what_was_relayed(node, mock, redis_url, funded):
    key, account_id, _ = funded
    r = redis.Redis.from_url(redis_url)
    with httpx.stream("POST", node.base + "/chat/completions", headers={"X-API-Key": key},
                      json={"model": "mock/chat-1", "messages": HELLO, "stream": True,
                            "mock": {"chunks": 50, "chunk_delay_ms": 100}}) as resp:
        lines = resp.iter_lines()
        assert any(line.startswith("data: {") for line in lines)
        assert r.zcard(keyspace.streams(account_id)) == 1
    deadline = time.time() + 5
    while (r.zcard(keyspace.streams(account_id)) or wallet(redis_url, account_id)["held"]) and time.time() < deadline:
        time.sleep(0.05)
    assert r.zcard(keyspace.streams(account_id)) == 0
    w = wallet(redis_url, account_id)
    assert w["held"] == 0 and 0 < 100_000_000_000 - w["balance"] < cost("mock/chat-1", 5, 50)
    deadline = time.time() + 5
    while mock_stats(mock)["active"] and time.time() < deadline:
        time.sleep(0.05)
    assert mock_stats(mock)["active"] == 0  # the upstream request was stopped too


def test_a_client_that_leaves_mid_body_leaves_no_handler_behind(node, funded):
    key, _, _ = funded
    body = orjson.dumps({"model": "mock/chat-1", "messages": HELLO})

    def handler_tasks() -> int:
        async def count():
            return sum(1 for t in asyncio.all_tasks() if "_execute" in t.get_coro().__qualname__)
        return node.thread.run(count())

    before = handler_tasks()
    with socket.create_connection(("127.0.0.1", node.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (key.encode(), len(body) + 100, body))  # 100 bytes short
        deadline = time.time() + 5
        while handler_tasks() == before and time.time() < deadline:
            time.sleep(0.02)  # the handler is waiting for the rest of its body
        assert handler_tasks() == before + 1
    deadline = time.time() + 5
    while handler_tasks() > before and time.time() < deadline:
        time.sleep(0.02)
    assert handler_tasks() == before  # its task ended when the connection did


def test_relay_does_not_buffer(node, mock, funded):
    """The client reads chunk 1 while the mock is still holding chunk 2 back at its gate."""
    key, _, _ = funded
    stream = client(node, key).chat.completions.create(
        model="mock/chat-1", messages=HELLO, stream=True, extra_body={"mock": {"gate_after": 1}})
    first = next(iter(stream))
    assert first.choices[0].delta.content == "tok0 "
    httpx.post(f"http://127.0.0.1:{mock.port}/_mock/release")
    rest = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert rest == "tok1 tok2 tok3 tok4 "


def test_a_client_that_reads_late_gets_every_event_in_order_and_pays_once(node, mock, redis_url, funded):
    """The provider has a long stream while the client reads nothing for seconds: what the
    client cannot take yet waits (upstream, paused by backpressure), and leaves in order once it reads."""
    key, account_id, _ = funded
    n = 40_000  # ~7 MB of events: more than the loopback socket buffers hold
    before = wallet(redis_url, account_id)["balance"]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", node.port))
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
    conn.sock = sock
    body = {"model": "mock/chat-1", "messages": HELLO, "stream": True, "max_tokens": n,
            "stream_options": {"include_usage": True}, "mock": {"chunks": n}}
    conn.request("POST", "/v1/chat/completions", body=orjson.dumps(body),
                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    # the client reads nothing for a while: the gateway stops taking the provider's events once
    # a little is waiting (backpressure, tests/handlers/test_stream_relay.py measures how little),
    # so the provider may or may not be done by now; nothing is lost either way
    time.sleep(3)
    resp = conn.getresponse()  # only now does the client read
    assert resp.status == 200
    events = [orjson.loads(e[6:]) for e in resp.read().split(b"\n\n") if e.startswith(b"data: {")]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in events if c["choices"])
    assert text == "".join(f"tok{k} " for k in range(n))
    assert events[-1]["usage"]["completion_tokens"] == n
    assert before - wallet(redis_url, account_id)["balance"] == cost("mock/chat-1", 5, n)
    assert wallet(redis_url, account_id)["held"] == 0
    conn.close()


def test_upstream_connections_are_reused(node, mock, funded):
    key, _, _ = funded
    c = client(node, key)
    c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    before = mock_stats(mock)["connections"]
    for _ in range(10):
        c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    # exactly one new connection: the stats request itself; the gateway opened none
    assert mock_stats(mock)["connections"] == before + 1


def test_fallback_charges_the_model_that_answered(node, redis_url, funded):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)["balance"]
    out = client(node, key, default_headers={"X-Svc-Include-Meta": "1"}).chat.completions.create(
        model="dead/chat", messages=HELLO, extra_body={"models": ["mock/chat-1", "mock/chat-big"]})
    assert out.model == "mock/chat-1"
    assert before - wallet(redis_url, account_id)["balance"] == cost("mock/chat-1", 5, 5)
    body = {"model": "dead/chat", "messages": HELLO, "models": ["mock/chat-1", "mock/chat-big"]}
    models = [node.ctx.catalog.resolve(m) for m in ("dead/chat", "mock/chat-1", "mock/chat-big")]
    assert out.model_extra["svc"]["hold_toman"] == "%d.%06d" % divmod(sizing.hold_micro(body, models), 1_000_000)


def test_smaller_max_tokens_means_a_smaller_hold(node, funded):
    key, _, _ = funded
    c = client(node, key, default_headers={"X-Svc-Include-Meta": "1"})
    big = c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    small = c.chat.completions.create(model="mock/chat-1", messages=HELLO, max_tokens=10)
    assert Decimal(small.model_extra["svc"]["hold_toman"]) < Decimal(big.model_extra["svc"]["hold_toman"])


def test_free_model_needs_no_balance_and_credits_back_unserved_requests(node, redis_url):
    key, account_id, _ = seed(redis_url, balance="0")
    c = client(node, key)
    out = c.chat.completions.create(model="mock/chat-1:free", messages=HELLO)
    assert out.choices[0].message.content
    r = redis.Redis.from_url(redis_url)
    from upgate.billing import jalali

    used = lambda: int(r.get(keyspace.free(account_id, jalali.day_key())) or 0)  # noqa: E731
    assert used() == 1
    with pytest.raises(openai.RateLimitError) as e:
        c.chat.completions.create(model="mock/chat-1:free", messages=HELLO, extra_body={"mock": {"status": 429}})
    assert e.value.code == "free_capacity_exhausted" and "Retry-After" in e.value.response.headers
    assert used() == 1  # never served: credited back
    assert wallet(redis_url, account_id) == {"balance": 0, "held": 0}


def test_free_quota_exceeded_names_an_alternative(node, redis_url):
    from upgate.services import accounts
    from upgate.store import connection as store

    key, account_id, _ = seed(redis_url, balance="0")
    accounts.set_free_quota(store.connect_sync(redis_url), account_id, 1)
    c = client(node, key)
    c.chat.completions.create(model="mock/chat-1:free", messages=HELLO)
    with pytest.raises(openai.RateLimitError) as e:
        c.chat.completions.create(model="mock/chat-1:free", messages=HELLO)
    assert e.value.code == "free_quota_exceeded"
    assert e.value.response.headers["Retry-After"] == "3600"
    assert e.value.body["svc"]["alternative_model"] == "mock/chat-1"
    assert e.value.body["svc"]["alternative_model_price_toman_per_million"] == "600000.000000"


def test_body_over_20mb_is_413(node, funded):
    key, _, _ = funded
    big = b'{"model": "mock/chat-1", "messages": [{"role": "user", "content": "' + b"a" * (20 * 1024 * 1024) + b'"}]}'
    resp = httpx.post(node.base + "/chat/completions", content=big, headers={"X-API-Key": key})
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large"

    def chunks():
        for _ in range(25):
            yield b"a" * (1024 * 1024)

    resp = httpx.post(node.base + "/chat/completions", content=chunks(), headers={"X-API-Key": key})
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large"


def test_pricing_unavailable_before_any_catalog(make_node, redis_url):
    r = redis.Redis.from_url(redis_url)
    for k in r.scan_iter("{catalog}*"):
        r.delete(k)
    node = make_node()  # starts with no catalog ever loaded
    key, _, _ = seed(redis_url)
    with pytest.raises(openai.APIStatusError) as e:
        client(node, key).chat.completions.create(model="mock/chat-1", messages=HELLO)
    assert e.value.status_code == 503 and e.value.code == "pricing_unavailable"


@pytest.mark.parametrize("dialect", ["openai", "openrouter"])
def test_embeddings_body_reaches_the_provider_unaltered(redis_url, mock, funded, dialect):
    """OpenAI refuses unknown fields on embeddings: no `stream`, `usage` or `stream_options` is
    added there (chat and completions still get them)."""
    from tests.gateway import Node, load_catalog, test_settings

    key, _, _ = funded
    load_catalog(redis_url)
    node = Node(test_settings(redis_url), {"mock": mock.provider(dialect=dialect)})
    try:
        c = client(node, key)
        emb = c.embeddings.create(model="mock/embed-1", input="hello", dimensions=4,
                                  extra_body={"models": ["mock/embed-1"]})
        assert len(emb.data[0].embedding) == 4
        sent = mock_stats(mock)["last_body"]
        assert sent == {"model": "mock-embed-1", "input": "hello", "dimensions": 4,
                        "encoding_format": "base64"}
        c.completions.create(model="mock/chat-1", prompt="Say hi", max_tokens=3)
        sent = mock_stats(mock)["last_body"]
        assert sent["stream"] is False
        assert ("usage" in sent) == (dialect == "openrouter")
    finally:
        node.close()


def test_shutdown_cut_does_not_fall_back_to_the_next_model(node, mock, redis_url, funded):
    """abort() (the grace period is over) stops the request: no next candidate is tried."""
    import threading

    key, account_id, _ = funded
    result = {}

    def run():
        try:
            client(node, key).chat.completions.create(
                model="mock/chat-1", messages=HELLO,
                extra_body={"models": ["mock/chat-big"], "mock": {"latency_ms": 3000}})
            result["answer"] = "ok"
        except openai.APIStatusError as e:
            result["answer"] = (e.status_code, e.code, e.message)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 5
    while not mock_stats(mock)["active"] and time.time() < deadline:
        time.sleep(0.02)
    node.drain(0.1)
    t.join(10)
    status, code, message = result["answer"]
    assert (status, code) == (502, "upstream_error") and "shutdown" in message
    assert mock_stats(mock)["requests"] == 1  # mock/chat-big was never asked
    assert wallet(redis_url, account_id) == {"balance": 100_000_000_000, "held": 0}


def test_a_store_that_refuses_does_not_turn_a_4xx_into_503(node, redis_url, funded):
    """The rate headers of an error before admit are best effort: a store that answers BUSY
    (here: a long script) leaves them out, the client still gets the spec's 4xx."""
    import threading

    key, _, _ = funded
    h = {"Authorization": f"Bearer {key}"}
    assert httpx.get(node.base + "/svc/me", headers=h).status_code == 200  # the key is cached now
    r = redis.Redis.from_url(redis_url)
    r.ping()  # a connection opened before the store turns busy, for SCRIPT KILL
    r.config_set("busy-reply-threshold", 10)

    def busy():
        try:
            redis.Redis.from_url(redis_url).eval("while true do end", 0)
        except redis.ResponseError:  # killed below
            pass

    blocker = threading.Thread(target=busy)
    blocker.start()
    try:
        time.sleep(0.3)
        bad = {"model": "mock/chat-1", "messages": HELLO, "max_tokens": "100"}
        resp = httpx.post(node.base + "/chat/completions", json=bad, headers=h, timeout=20)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request"
        assert "X-RateLimit-Limit" not in resp.headers and resp.headers["X-Svc-Request-Id"]
        resp = httpx.post(node.base + "/chat/completions", json={"model": "nope/none", "messages": HELLO},
                          headers=h, timeout=20)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    finally:
        r.script_kill()
        blocker.join(10)
        r.config_set("busy-reply-threshold", 5000)
    resp = httpx.post(node.base + "/chat/completions", json=bad, headers=h)
    assert resp.status_code == 400 and resp.headers["X-RateLimit-Limit"] == "60"


def _raw_stream(node, key, mock_opts: dict, timeout: float = 30) -> tuple[bytes, float | None]:
    """The raw SSE bytes of one stream, and when (s after sending) the first keep-alive came."""
    raw, first = b"", None
    t0 = time.monotonic()
    with httpx.stream("POST", node.base + "/chat/completions", headers={"X-API-Key": key}, timeout=timeout,
                      json={"model": "mock/chat-1", "messages": HELLO, "stream": True, "mock": mock_opts}) as resp:
        assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        for chunk in resp.iter_raw():
            raw += chunk
            if first is None and b": keep-alive" in raw:
                first = time.monotonic() - t0
    return raw, first


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_keepalives_while_waiting_for_the_first_upstream_byte(make_node, redis_url, funded):
    node = make_node(keepalive_s=0.6)
    key, account_id, _ = funded
    raw, first = _raw_stream(node, key, {"latency_ms": 2000})
    head, _, rest = raw.partition(b"data: ")
    assert head.count(b": keep-alive\n\n") >= 2 and head.replace(b": keep-alive\n\n", b"") == b""
    assert 0.55 <= first <= 0.6 + 0.2 + 0.25  # keepalive_s + one sweeper tick + slack
    assert raw.endswith(b"data: [DONE]\n\n") and b"tok4" in rest
    # the openai client skips the comments and parses the stream as usual
    before = wallet(redis_url, account_id)["balance"]
    chunks = list(client(node, key).chat.completions.create(
        model="mock/chat-1", messages=HELLO, stream=True, extra_body={"mock": {"latency_ms": 1500}}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "tok0 tok1 tok2 tok3 tok4 "
    assert before - wallet(redis_url, account_id)["balance"] == 3_750_000


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_first_keepalive_is_at_most_a_second_late(make_node, funded):
    """The sweeper ticks at least once a second, whatever keepalive_s (15 s by default)."""
    node = make_node(keepalive_s=4.5)
    key, _, _ = funded
    raw, first = _raw_stream(node, key, {"latency_ms": 6000})
    assert 4.45 <= first <= 4.5 + 1.0 + 0.25
    assert raw.index(b": keep-alive") < raw.index(b"data: ")


def test_leases_of_long_streams_are_renewed(make_node, redis_url, funded):
    """A stream longer than its lease is renewed by the sweeper, never reaped under it."""
    node = make_node(lease_s=1.2)  # renewed every 0.4 s, reaped 1.2 s after its last renewal
    key, account_id, _ = funded
    r = redis.Redis.from_url(redis_url)
    chunks = list(client(node, key).chat.completions.create(
        model="mock/chat-1", messages=HELLO, stream=True, extra_body={"mock": {"chunks": 12, "chunk_delay_ms": 300}}))
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 12
    assert 100_000_000_000 - wallet(redis_url, account_id)["balance"] == cost("mock/chat-1", 5, 12)
    assert r.zcard(keyspace.streams(account_id)) == 0 and wallet(redis_url, account_id)["held"] == 0
    time.sleep(0.5)  # two more reaper ticks
    assert 'upgate_holds_total{outcome="reaped"}' not in httpx.get(node.url + "/metrics").text


def test_async_client_stream_embeddings_and_legacy_completions(node, redis_url, funded):
    key, account_id, _ = funded

    async def run():
        c = openai.AsyncOpenAI(base_url=node.base, api_key=key, max_retries=0)
        try:
            stream = await c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True,
                                                     stream_options={"include_usage": True})
            chunks = [ch async for ch in stream]
            emb = await c.embeddings.create(model="mock/embed-1", input=["hello world", "second input"])
            done = await c.completions.create(model="mock/chat-1", prompt="Say hi", max_tokens=3)
            return chunks, emb, done
        finally:
            await c.close()

    before = wallet(redis_url, account_id)["balance"]
    chunks, emb, done = asyncio.run(run())
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "tok0 tok1 tok2 tok3 tok4 "
    assert chunks[-1].usage.completion_tokens == 5
    assert [d.index for d in emb.data] == [0, 1] and len(emb.data[0].embedding) > 0
    assert done.choices[0].text == "tok0 tok1 tok2 "
    expected = 3_750_000 + emb.usage.prompt_tokens * 20_000 + cost("mock/chat-1", done.usage.prompt_tokens, 3)
    assert before - wallet(redis_url, account_id)["balance"] == expected
    assert wallet(redis_url, account_id)["held"] == 0


def test_gateway_failures_surface_as_the_clients_exception_classes(make_node, redis_url, funded):
    node = make_node(upstream_silence_s=0.5)
    key, account_id, _ = funded
    c = client(node, key)
    with pytest.raises(openai.InternalServerError) as e:  # 504: no byte within the silence limit
        c.chat.completions.create(model="mock/chat-1", messages=HELLO, extra_body={"mock": {"latency_ms": 3000}})
    assert e.value.status_code == 504 and e.value.code == "upstream_timeout"
    with pytest.raises(openai.InternalServerError) as e:  # 503: the provider cannot be reached
        c.chat.completions.create(model="dead/chat", messages=HELLO)
    assert e.value.status_code == 503 and e.value.code == "upstream_unavailable"
    assert e.value.response.headers["Retry-After"] == "30"
    with pytest.raises(openai.APIStatusError) as e:  # 413: the openai client has no class of its own
        c.chat.completions.create(model="mock/chat-1",
                                  messages=[{"role": "user", "content": "a" * (20 * 1024 * 1024)}])
    assert e.value.status_code == 413 and e.value.code == "request_too_large"
    assert e.value.response.headers["x-should-retry"] == "false"
    assert wallet(redis_url, account_id) == {"balance": 100_000_000_000, "held": 0}


def test_a_stream_whose_hold_was_reaped_under_it_is_counted_lost_and_still_charged(make_node, redis_url, funded):
    """A stall longer than the lease lets the reaper release a live request's hold. The next
    renewal notices: the hold is counted as lost for the operator, the stream goes on, and its
    settlement still charges the request (once), leaving nothing held."""
    node = make_node(lease_s=1.2)
    key, account_id, _ = funded
    r = redis.Redis.from_url(redis_url)
    stream = client(node, key).chat.completions.create(
        model="mock/chat-1", messages=HELLO, stream=True, extra_body={"mock": {"chunks": 8, "chunk_delay_ms": 250}})
    chunks = [next(stream)]
    far = int((time.time() + 3600) * 1000)  # as if the node had stalled for an hour
    assert node.thread.run(node.ctx.ledger.reap(now_ms=far)) == 1
    assert wallet(redis_url, account_id)["held"] == 0 and r.zcard(keyspace.streams(account_id)) == 0
    chunks += list(stream)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 8
    assert 100_000_000_000 - wallet(redis_url, account_id)["balance"] == cost("mock/chat-1", 5, 8)
    assert wallet(redis_url, account_id)["held"] == 0
    metrics = httpx.get(node.url + "/metrics").text
    assert 'upgate_holds_total{outcome="lost"} 1.0' in metrics


def test_a_stream_without_provider_usage_still_gives_the_client_the_usage_it_asked_for(node, redis_url, funded):
    """The provider sent no usage: the gateway charges its estimate from the relayed text, and a
    client that asked for usage (or meta) gets that estimate in the final chunk, marked estimated."""
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)["balance"]
    chunks = list(client(node, key).chat.completions.create(
        model="mock/chat-1", messages=HELLO, stream=True, stream_options={"include_usage": True},
        extra_body={"mock": {"no_usage": True, "chunks": 4}}, extra_headers={"X-Svc-Include-Meta": "1"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    final = chunks[-1]
    assert final.choices == [] and final.usage.model_extra["estimated"] is True
    completion = (len(text) + 3) // 4
    assert final.usage.completion_tokens == completion
    charged = before - wallet(redis_url, account_id)["balance"]
    assert charged == cost("mock/chat-1", final.usage.prompt_tokens, completion)
    assert Decimal(final.model_extra["svc"]["cost_toman"]) * 1_000_000 == charged
    # without asking, no chunk with empty choices reaches the client
    plain = list(client(node, key).chat.completions.create(
        model="mock/chat-1", messages=HELLO, stream=True, extra_body={"mock": {"no_usage": True}}))
    assert all(c.choices for c in plain)


def test_a_402_says_which_smaller_max_tokens_fits(node, redis_url):
    """The hold grows with max_tokens: a 402 names the largest max_tokens the available balance
    covers for the same request (svc.max_tokens_that_fit), and that request is served."""
    model = node.ctx.catalog.resolve("mock/chat-1")
    body = {"model": "mock/chat-1", "messages": HELLO, "max_tokens": 4096}
    available = sizing.hold_micro({**body, "max_tokens": 300}, [model])
    from upgate.billing import money

    key, _account_id, _ = seed(redis_url, balance=money.fmt(available))
    c = client(node, key)
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="mock/chat-1", messages=HELLO, max_tokens=4096)
    assert e.value.status_code == 402
    fits = e.value.body["svc"]["max_tokens_that_fit"]
    assert sizing.hold_micro({**body, "max_tokens": fits}, [model]) <= available \
        < sizing.hold_micro({**body, "max_tokens": fits + 1}, [model])
    assert f"max_tokens at most {fits}" in e.value.message
    assert c.chat.completions.create(model="mock/chat-1", messages=HELLO, max_tokens=fits).choices
