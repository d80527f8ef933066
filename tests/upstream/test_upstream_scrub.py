"""Nothing of the provider reaches a client (issue 21 point 4) and the upstream model id reads as
the client's (issue 22 point 4): a property test over every shape a provider may print our key
and base URL in, and end-to-end checks of the paths a provider's text can take."""
from __future__ import annotations

from urllib.parse import quote, urlsplit

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gateway import Node, load_catalog, seed
from tests.gateway import test_settings as settings_for
from tests.scripted_upstream import ScriptedUpstream
from upgate.upstream.errors import body_error_message, map_error
from upgate.upstream.providers import Provider
from upgate.upstream.scrub import REDACTED, client_text, scrub

PROVIDERS = [
    Provider(name="a", base_url="https://api.acme-llm.example:8443/api/v1",
             api_key="sk-proj-Q3xT9vLmZ8pW2rK7nB4cY6hJ1fD5sA0e", dialect="openai", available=True),
    Provider(name="b", base_url="http://10.20.30.40:8000/v1", api_key="AIzaSyD4f8Gk2LmN0pQrStUvWxYz1234567",
             dialect="openai", available=True),
    Provider(name="c", base_url="http://llm-gw.internal/v1", api_key="gsk_9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c",
             dialect="openai", available=True),
    Provider(name="d", base_url="https://[fd00::12]:9443/openai/v1", api_key="k7Hq2Zp9Xw4Lm8Nb3Vc6Rt1Ys5",
             dialect="openai", available=True),
]


def shapes(p: Provider) -> list[str]:
    """Every form a provider has been seen to print our key or its address in."""
    key, url = p.api_key, p.base_url
    host = urlsplit(url).hostname
    return [
        key, quote(key, safe=""), orjson.dumps(key).decode(), f"'{key}'",
        key[:3] + "..." + key[-4:], key[:7] + "*" * 20 + key[-4:], "*" * 12 + key[-4:], "..." + key[-4:],
        url, url + "/chat/completions", quote(url, safe=""), orjson.dumps(url).decode()[1:-1],
        f'"{url}"', urlsplit(url).netloc, host,
    ]


def leaks(p: Provider, out: str) -> list[str]:
    key, url = p.api_key, p.base_url
    host = urlsplit(url).hostname
    found = [s for s in (key, key[:7], key[-6:], quote(key, safe=""), url, quote(url, safe=""), host)
             if s.lower() in out.lower()]
    if "10.20.30.40" in out:
        found.append("ip")
    return found


words = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd", "Zs", "Po")), max_size=30)
joiners = st.sampled_from(["", " ", ": ", "=", "(", ") ", ", ", "\n", "/", '"'])


@settings(max_examples=400, deadline=None)
@given(p=st.sampled_from(PROVIDERS), data=st.data())
def test_the_key_and_base_url_never_reach_a_client_in_any_shape_or_position(p, data):
    pieces = []
    for _ in range(data.draw(st.integers(1, 4))):
        pieces += [data.draw(words), data.draw(joiners), data.draw(st.sampled_from(shapes(p))),
                   data.draw(joiners)]
    pieces.append(data.draw(words))
    message = "".join(pieces)
    out = client_text(message, p)
    assert not leaks(p, out), (message, out)
    # ... whichever way the provider wrapped it: an error body at any status, or a bare string
    err = orjson.dumps({"error": {"message": message, "code": data.draw(st.sampled_from(
        ["bad_thing", p.api_key[:12], "org-abc123", "10.0.0.1"]))}})
    status, code, text = map_error(data.draw(st.sampled_from([400, 409, 418, 429, 500])), err, p, False)
    assert not leaks(p, text) and not leaks(p, code)
    assert not leaks(p, body_error_message({"message": message}, p))


@pytest.mark.parametrize("text", [
    "key gsk_abcdefghij0123456789 and xai-ABCDEFGHIJ0123456789 and AKIAABCDEFGHIJKLMNOP",
    "stripe sk_live_51HxYzAbCdEfGhIj and sk-ant-api03-AbCdEfGh and AIzaSyAbCdEfGhIjKlMnOp",
    "masked sk-...abcd and ****wxyz here",
    "from 10.1.2.3, 172.16.0.9:8080, 192.168.1.1, 127.0.0.1 and [::1]:80 and fc00::1 and fd12:3456::7",
    "hosts vllm.internal, api.local:8000, svc.ns.svc.cluster.local and localhost:11434",
    "see https%3A%2F%2Fapi.secret.example%2Fv1 or https:\\/\\/api.secret.example\\/v1",
])
def test_other_providers_keys_internal_addresses_and_encoded_urls_are_scrubbed(text):
    out = scrub(text, None)
    for secret in ("gsk_", "xai-", "AKIA", "sk_live", "sk-ant", "AIza", "abcd", "wxyz", "10.1.2.3", "172.16",
                   "192.168", "127.0", "::1", "fc00", "fd12", "internal", "local", "11434", "secret.example"):
        assert secret not in out, (secret, out)


def test_ordinary_text_stays_readable():
    text = "max_tokens must be <= 4096 at 12:30:45; version 1.2.3 of the task-force's key-value store."
    assert scrub(text, PROVIDERS[0]) == text


def test_the_upstream_model_id_reads_as_the_clients():
    class Model:
        id, upstream_model = "litellm/missing", "missing"
    assert client_text("Invalid model name passed in model=missing. Call /v1/models.", None, Model) == \
        "Invalid model name passed in model=litellm/missing. Call /v1/models."
    assert client_text("litellm/missing and missing-2 and missingno", None, Model) == \
        "litellm/missing and missing-2 and missingno"


# ---- end to end: every path a provider's text takes to a client ------------------------------

@pytest.fixture
def upstream():
    up = ScriptedUpstream()
    yield up
    up.close()


def test_an_error_in_a_200_body_is_scrubbed(redis_url, upstream):
    """A provider answering HTTP 200 with an error body: its message reached clients verbatim,
    with the provider's URL, our key and its org id."""
    load_catalog(redis_url)
    provider = upstream.provider()
    provider = Provider(name="mock", base_url=provider.base_url, api_key="sk-live-OURSECRETKEY1234",
                        dialect="openai", available=True)
    node = Node(settings_for(redis_url), {"mock": provider})
    try:
        key, _, _ = seed(redis_url, balance="100000")
        secret = (f"Upstream {provider.base_url}/chat/completions refused key sk-live-OURSECRETKEY1234 "
                  f"(org-ourorg42) at 10.0.3.7 for model mock-chat-1")
        upstream.script = [(0, orjson.dumps({"error": {"message": secret, "code": 500}}))]
        res = httpx.post(node.base + "/chat/completions", timeout=30, headers={"Authorization": f"Bearer {key}"},
                         json={"model": "mock/chat-1", "messages": [{"role": "user", "content": "hi"}]})
        message = res.json()["error"]["message"]
        assert res.status_code == 502
        for leaked in ("127.0.0.1", "OURSECRET", "ourorg42", "10.0.3.7", f":{upstream.port}"):
            assert leaked not in message, message
        assert "mock/chat-1" in message and REDACTED in message
    finally:
        node.close()


def test_a_passed_through_400_names_the_clients_model(node, redis_url, mock):
    key, _, _ = seed(redis_url, balance="100000")
    res = httpx.post(node.base + "/chat/completions", timeout=30, headers={"Authorization": f"Bearer {key}"},
                     json={"model": "mock/chat-1", "messages": [{"role": "user", "content": "hi"}],
                           "mock": {"status": 400, "error": "Invalid model name passed in model=mock-chat-1"}})
    assert res.status_code == 400
    assert res.json()["error"]["message"] == "Invalid model name passed in model=mock/chat-1"
    res = httpx.post(node.base + "/chat/completions", timeout=30, headers={"Authorization": f"Bearer {key}"},
                     json={"model": "mock/chat-1", "messages": [{"role": "user", "content": "hi"}],
                           "mock": {"status": 409}})
    message = res.json()["error"]["message"]
    assert res.status_code == 409 and "127.0.0.1" not in message and "SECRET" not in message


def test_every_key_of_a_pool_is_scrubbed():
    from upgate.upstream.providers import Provider
    from upgate.upstream.scrub import scrub

    pool = Provider(name="p", base_url="https://api.example.com/v1", api_key="poolkey-AAAA-1111",
                    dialect="openai", available=True,
                    keys=(("K_A", "poolkey-AAAA-1111"), ("K_B", "poolkey-BBBB-2222")))
    out = scrub("Incorrect API key provided: poolkey-BBBB-2222 and poolkey-AAAA-1111", pool)
    assert "BBBB" not in out and "AAAA" not in out and "2222" not in out
