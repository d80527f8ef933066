"""GET /v1/models and /v1/models/{id} on real gateway nodes (tests/gateway.py: the app,
Context and subscriber `upgate serve` runs), read with the real openai client.

The `make_node` fixture loads the shared test catalog; each test here replaces it with the
acme catalog below before starting its nodes (or deletes it, for the "before any catalog"
cases). The acme models route to the node's "mock" provider; the models endpoints never
call a provider anyway."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import openai
import pytest

from upgate.catalog import rules as catalog, store as catalog_store
from upgate.store import connection as store, keyspace

KEY = "sk-up-" + "x" * 40  # well-formed, unknown: the models routes need no key

CATALOG = """
[[models]]
id = "acme/chat-1"
name = "Acme Chat 1"
provider = "mock"
upstream_model = "chat-1"
prompt_toman_per_million = "15000"
completion_toman_per_million = "60000.5"
request_toman = "2"
capabilities = ["chat", "completions"]
context_length = 128000
max_output_tokens = 16384

[[models]]
id = "acme/chat-1:free"
name = "Acme Chat 1 (free)"
provider = "mock"
upstream_model = "chat-1:free"
prompt_toman_per_million = "0"
completion_toman_per_million = "0"
capabilities = ["chat"]
context_length = 32000
max_output_tokens = 4096

[[models]]
id = "acme/embed-1"
provider = "mock"
prompt_toman_per_million = "20000"
completion_toman_per_million = "0"
capabilities = ["embeddings"]

[[models]]
id = "acme/secret"
provider = "mock"
prompt_toman_per_million = "1"
completion_toman_per_million = "1"
hidden = true
"""


def load(redis_url: str, text: str = CATALOG) -> str:
    return catalog_store.store(store.connect_sync(redis_url), catalog.parse(text, {"mock", "dead"}))


def drop_catalog(redis_url: str) -> None:
    store.connect_sync(redis_url).delete(keyspace.CATALOG, keyspace.CATALOG_META)


def client(node, api_key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=node.base, api_key=api_key, max_retries=0, timeout=10)


def get(node, path: str, headers: dict | None = None):
    """Raw GET under /v1: (status, headers, parsed JSON body)."""
    req = urllib.request.Request(node.base + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def wait_for(pred, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture
def acme_node(make_node, redis_url):
    """A real gateway node serving the acme catalog."""
    load(redis_url)
    return make_node()


def test_before_any_catalog_the_list_is_503_pricing_unavailable(make_node, redis_url):
    drop_catalog(redis_url)
    node = make_node()
    status, headers, body = get(node, "/models")
    assert status == 503 and body["error"]["code"] == "pricing_unavailable"
    assert headers["X-Svc-Request-Id"].startswith("req_")
    with pytest.raises(openai.APIStatusError) as exc:
        client(node).models.list()
    assert exc.value.status_code == 503
    # a well-formed id cannot be priced yet; a malformed one can never exist
    assert get(node, "/models/acme/chat-1")[0] == 503
    status, _, body = get(node, "/models/NoPrefix")
    assert status == 404 and body["error"]["code"] == "model_not_found"


def test_list_and_retrieve_with_the_openai_client(acme_node):
    c = client(acme_node)

    page = c.models.list()
    ids = [m.id for m in page.data]
    assert ids == ["acme/chat-1", "acme/chat-1:free", "acme/embed-1"]  # hidden one left out
    first = page.data[0].to_dict()
    assert first["object"] == "model" and first["owned_by"] == "acme"
    assert first["svc_pricing"] == {
        "prompt_toman_per_million": "15000.000000",
        "completion_toman_per_million": "60000.500000",
        "request_toman": "2.000000",
        "web_search_toman": "0.000000",
        "cached_prompt_toman_per_million": "15000.000000",  # unset: the prompt price
        "cache_write_toman_per_million": "15000.000000",
    }

    m = c.models.retrieve("acme/chat-1:free")  # the client percent-encodes the slash
    rec = m.to_dict()
    assert rec["id"] == "acme/chat-1:free" and rec["object"] == "model"
    assert rec["owned_by"] == "acme" and rec["name"] == "Acme Chat 1 (free)"
    assert rec["context_length"] == 32000 and rec["max_output_tokens"] == 4096
    assert rec["capabilities"] == ["chat"]
    assert isinstance(rec["created"], int) and rec["created"] > 1_600_000_000
    assert rec["svc_pricing"] == {
        "prompt_toman_per_million": "0.000000", "completion_toman_per_million": "0.000000",
        "request_toman": "0.000000", "web_search_toman": "0.000000",
        "cached_prompt_toman_per_million": "0.000000", "cache_write_toman_per_million": "0.000000",
    }
    assert c.models.retrieve("acme/embed-1").to_dict()["capabilities"] == ["embeddings"]


@pytest.mark.parametrize("path", ["/models/acme%2Fchat-1%3Afree", "/models/acme/chat-1:free",
                                  "/models/acme%2Fchat-1:free"])
def test_retrieve_accepts_encoded_and_plain_ids(acme_node, path):
    status, headers, body = get(acme_node, path)
    assert status == 200 and body["id"] == "acme/chat-1:free"
    assert headers["Content-Type"].startswith("application/json")
    assert headers["X-Svc-Request-Id"].startswith("req_")


@pytest.mark.parametrize("mid", ["NoPrefix", "Upper/Case", "acme/x:bogus", "acme/secret",
                                 "acme/unknown", "acme/Chat-1", "acme/chat-1:batch"])
def test_bad_hidden_and_unknown_ids_are_404_model_not_found(acme_node, mid):
    with pytest.raises(openai.NotFoundError) as exc:
        client(acme_node).models.retrieve(mid)
    err = exc.value.body
    assert err["code"] == "model_not_found" and err["type"] == "model_not_found"
    assert err["param"] is None
    assert exc.value.response.headers["x-should-retry"] == "false"


def test_other_paths_under_models_are_not_found(acme_node):
    status, _, body = get(acme_node, "/models/")
    assert status == 404 and body["error"]["code"] == "not_found"


def test_a_second_node_sees_a_new_catalog_without_restart(acme_node, make_node, redis_url):
    a, b = acme_node, make_node()
    assert [m.id for m in client(b).models.list().data] == [
        "acme/chat-1", "acme/chat-1:free", "acme/embed-1"]
    # spy on the subscriber's hand-off (Context._dispatch → Catalog.on_event) on both nodes
    seen = {a.port: [], b.port: []}
    for node in (a, b):
        real = node.ctx.catalog.on_event

        def spy(msg, real=real, out=seen[node.port]):
            out.append(msg)
            return real(msg)
        node.ctx.catalog.on_event = spy
    version = load(redis_url, """
[[models]]
id = "acme/chat-2"
provider = "mock"
prompt_toman_per_million = "100"
completion_toman_per_million = "300"
""")
    for node in (a, b):
        # well inside the 30 s version poll: only the pub/sub event can have done this
        wait_for(lambda: node.ctx.catalog.version == version)
        assert {"t": "catalog", "version": version} in seen[node.port]
        c = client(node)
        assert [m.id for m in c.models.list().data] == ["acme/chat-2"]
        assert c.models.retrieve("acme/chat-2").to_dict()["svc_pricing"][
            "completion_toman_per_million"] == "300.000000"
        with pytest.raises(openai.NotFoundError):
            c.models.retrieve("acme/chat-1")


def test_a_node_started_before_any_catalog_picks_up_the_first_one(make_node, redis_url):
    drop_catalog(redis_url)
    node = make_node()
    assert get(node, "/models")[0] == 503
    load(redis_url)
    wait_for(lambda: node.ctx.catalog.loaded)
    assert len(client(node).models.list().data) == 3


@pytest.mark.parametrize("path", ["/models/acme%252Fchat-1", "/models/acme%252Fchat-1%253Afree",
                                  "/models/acme%252fchat-1:free"])
def test_the_path_is_decoded_once_not_twice(acme_node, path):
    """Tornado decodes the path argument once; `%252F` is a literal `%2F` in the id, which
    no model id can hold. Decoding twice would resolve it to acme/chat-1."""
    status, headers, body = get(acme_node, path)
    assert status == 404 and body["error"]["code"] == "model_not_found"
    assert body["error"]["type"] == "model_not_found" and body["error"]["param"] is None
    assert headers["x-should-retry"] == "false"
    assert "%2F" in body["error"]["message"] or "%2f" in body["error"]["message"]


# ---- X-RateLimit-* on the keyless routes --------------------------------------------------------

RATE = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def rate_of(headers) -> tuple[int, int, int] | None:
    present = [h for h in RATE if headers.get(h) is not None]
    if not present:
        return None
    assert len(present) == 3, present  # all three or none
    return tuple(int(headers[h]) for h in RATE)


def test_a_valid_key_gets_rate_headers_without_counting(acme_node, redis_url):
    import httpx

    from tests.gateway import seed

    key, _, _ = seed(redis_url, rpm=7)
    for headers in ({"Authorization": f"Bearer {key}"}, {"X-API-Key": key}):
        for path in ("/models", "/models/acme%2Fchat-1:free", "/models/acme/chat-1"):
            status, h, _ = get(acme_node, path, headers)
            assert status == 200
            limit, remaining, reset = rate_of(h)
            assert (limit, remaining) == (7, 7)  # read, never counted
            assert reset >= int(time.time())
        # the error path of the keyed request carries them too
        status, h, body = get(acme_node, "/models/acme/unknown", headers)
        assert status == 404 and body["error"]["code"] == "model_not_found"
        assert rate_of(h)[:2] == (7, 7)

    # a counted request shows up in the next peek; the openai client sees the headers
    resp = httpx.post(acme_node.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": "acme/chat-1", "max_tokens": 5,
                            "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert resp.status_code == 200, resp.text
    raw = client(acme_node, key).models.with_raw_response.list()
    assert rate_of(raw.headers)[:2] == (7, 6)
    raw = client(acme_node, key).models.with_raw_response.retrieve("acme/chat-1:free")
    assert rate_of(raw.headers)[:2] == (7, 6)
    assert raw.parse().id == "acme/chat-1:free"


def test_a_missing_or_invalid_key_never_fails_the_keyless_routes(acme_node, redis_url):
    from tests.gateway import seed
    from upgate.services import accounts, keys

    db = store.connect_sync(redis_url)
    revoked, _, revoked_id = seed(redis_url, phone="09120000001")
    keys.revoke_key(db, revoked_id)
    suspended, suspended_acct, _ = seed(redis_url, phone="09120000002")
    accounts.suspend(db, suspended_acct)
    for headers in ({}, {"Authorization": f"Bearer {KEY}"}, {"X-API-Key": KEY},
                    {"Authorization": "Bearer"}, {"Authorization": "Basic abc"},
                    {"X-API-Key": "sk-up-short"}, {"Authorization": f"Bearer {revoked}"},
                    {"X-API-Key": suspended}):
        for path in ("/models", "/models/acme%2Fchat-1:free"):
            status, h, body = get(acme_node, path, headers)
            assert status == 200, (headers.keys(), path, body)
            assert rate_of(h) is None
        status, h, body = get(acme_node, "/models/acme/unknown", headers)
        assert status == 404 and body["error"]["code"] == "model_not_found"
        assert rate_of(h) is None
    # and through the openai client with an unknown key
    assert len(client(acme_node).models.list().data) == 3
