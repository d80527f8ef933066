"""Upstream error → gateway (status, code, message), and scrubbing what names the upstream."""

import logging

import orjson
import pytest

from upgate.upstream.errors import map_error
from upgate.upstream.providers import Provider
from upgate.upstream.scrub import REDACTED, scrub

PROVIDER = Provider(name="acme", base_url="https://api.acme-llm.example:8443/api/v1",
                    api_key="ak_live_0123456789abcdef", dialect="openai", available=True)


def body(message="The model said no.", code=None, **extra) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "x", "code": code, **extra}})


@pytest.mark.parametrize("status, free, expected", [
    (400, False, (400, "invalid_request")),
    (413, False, (400, "invalid_request")),
    (422, False, (400, "invalid_request")),
    (404, False, (404, "model_not_found")),
    (429, False, (429, "upstream_rate_limited")),
    (429, True, (429, "free_capacity_exhausted")),
    (500, False, (502, "upstream_error")),
    (503, True, (502, "upstream_error")),
    (409, False, (409, "conflict_here")),
])
def test_status_mapping_keeps_the_provider_message(status, free, expected) -> None:
    out = map_error(status, body(code="conflict_here"), PROVIDER, free)
    assert out == (*expected, "The model said no.")


@pytest.mark.parametrize("status", [401, 402, 403])
def test_our_bad_credentials_are_a_generic_502_and_a_warning(status, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="upgate.upstream"):
        out_status, code, message = map_error(status, body("Invalid key ak_live_0123456789abcdef"),
                                              PROVIDER, False)
    assert (out_status, code) == (502, "upstream_error")
    assert "ak_live" not in message and "Invalid key" not in message
    assert "acme" in caplog.text and str(status) in caplog.text
    assert "ak_live" not in caplog.text


def test_other_4xx_without_a_string_code_is_upstream_error() -> None:
    assert map_error(408, body(code=408), PROVIDER, False)[:2] == (408, "upstream_error")
    assert map_error(418, body(code="has spaces!"), PROVIDER, False)[:2] == (418, "upstream_error")


def test_non_json_and_odd_shapes() -> None:
    status, code, message = map_error(502, b"<html>Bad Gateway at api.acme-llm.example</html>",
                                      PROVIDER, False)
    assert (status, code) == (502, "upstream_error")
    assert "acme" not in message and "html" not in message
    assert map_error(400, b'{"error": "plain string"}', PROVIDER, False)[2] == "plain string"
    assert map_error(400, b'{"detail": "from detail"}', PROVIDER, False)[2] == "from detail"
    assert map_error(400, b"[1, 2]", PROVIDER, False)[2] == "The upstream provider rejected the request."
    assert map_error(429, b"", None, True)[1:] == (
        "free_capacity_exhausted", "The shared free capacity for this model is exhausted; "
        "retry later or use a paid model.")


def test_mapped_messages_are_scrubbed() -> None:
    message = ("Rate limited by https://api.acme-llm.example:8443/api/v1/chat/completions "
               "for org-AbC123 using key ak_live_0123456789abcdef; try again.")
    assert map_error(429, body(message), PROVIDER, False)[2] == (
        f"Rate limited by {REDACTED} for {REDACTED} using key {REDACTED}; try again.")


def test_scrub_removes_hosts_urls_keys_and_org_ids() -> None:
    message = ("Error at api.acme-llm.example:8443 (api.ACME-llm.example): see "
               "http://docs.other.example/errors?x=1 and wss://x.example/s. "
               "Keys sk-proj-abc_DEF-123 / Bearer tok.en-value / ak_live_0123456789abcdef, "
               "organization org-mockorg. Keep this: max_tokens must be <= 4096.")
    out = scrub(message, PROVIDER)
    for secret in ("acme", "ACME", "docs.other", "x.example", "sk-proj", "tok.en",
                   "ak_live", "org-mockorg", "8443"):
        assert secret not in out, secret
    assert out == (
        f"Error at {REDACTED} ({REDACTED}): see {REDACTED} and {REDACTED} "
        f"Keys {REDACTED} / Bearer {REDACTED} / {REDACTED}, organization {REDACTED}. "
        "Keep this: max_tokens must be <= 4096.")


def test_scrub_leaves_ordinary_words_alone() -> None:
    text = "The task-force asked: is desk-lamp an org chart? Bearer of bad news."
    assert scrub(text, None) == text.replace("Bearer of", f"Bearer {REDACTED}")


def test_scrub_mock_message_through_its_provider() -> None:
    mock = Provider(name="mock", base_url="http://127.0.0.1:5123/v1", api_key="sk-mock-SECRET123",
                    dialect="openai", available=True)
    message = ("Mock upstream at http://127.0.0.1:5123/v1/chat/completions failed for key "
               "sk-mock-SECRET123 (organization org-mockorg); host 127.0.0.1:5123")
    out = scrub(message, mock)
    assert "127.0.0.1" not in out and "SECRET" not in out and "mockorg" not in out
    assert out.startswith("Mock upstream at ")
