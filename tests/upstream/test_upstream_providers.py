"""The providers file, and the per-dialect body each provider receives."""

import logging

import orjson
import pytest

from upgate.upstream.dialects import prepare_body
from upgate.upstream.providers import Provider, ProvidersError, load_providers

GOOD = """
[providers.openrouter]
base_url = "https://openrouter.ai/api/v1/"
api_key_env = "OR_KEY"
dialect = "openrouter"

[providers.direct]
base_url = "https://api.openai.com/v1"
api_key_env = "OAI_KEY"
dialect = "openai"

[providers.mock]
base_url = "http://127.0.0.1:9000/v1"
dialect = "openai"
"""


def write(tmp_path, text: str):
    path = tmp_path / "providers.toml"
    path.write_text(text)
    return path


def test_load_good_file(tmp_path) -> None:
    providers = load_providers(write(tmp_path, GOOD), {"OR_KEY": "sk-or-1", "OAI_KEY": "sk-o-2"})
    assert set(providers) == {"openrouter", "direct", "mock"}
    router = providers["openrouter"]
    assert (router.dialect, router.api_key, router.available) == ("openrouter", "sk-or-1", True)
    assert router.url("chat/completions") == "https://openrouter.ai/api/v1/chat/completions"
    assert router.url("/embeddings") == "https://openrouter.ai/api/v1/embeddings"
    assert router.headers() == {"Content-Type": "application/json",
                                "Authorization": "Bearer sk-or-1"}
    assert providers["mock"].api_key is None and providers["mock"].available
    assert providers["mock"].headers() == {"Content-Type": "application/json"}


def test_missing_key_env_disables_only_that_provider(tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="upgate.upstream"):
        providers = load_providers(write(tmp_path, GOOD), {"OR_KEY": "sk-or-1"})
    assert providers["direct"].available is False and providers["direct"].api_key is None
    assert providers["openrouter"].available
    assert "OAI_KEY" in caplog.text and "direct" in caplog.text


def test_repr_never_shows_the_key() -> None:
    provider = Provider(name="p", base_url="https://x/v1", api_key="sk-secret-value",
                        dialect="openai", available=True)
    assert "sk-secret-value" not in repr(provider)


@pytest.mark.parametrize("text, fragment", [
    ("[providers.a]\nbase_url = ", "not valid TOML"),
    ("[other]\nx = 1\n", "no [providers.NAME] table"),
    ("[providers.a]\ndialect = \"openai\"\n", "[providers.a] needs base_url"),
    ("[providers.a]\nbase_url = \"ftp://x\"\n", "must be an http(s) URL"),
    ("[providers.a]\nbase_url = \"https://x/v1\"\ndialect = \"gemini\"\n", "unknown dialect"),
    ("[providers.a]\nbase_url = \"https://x/v1\"\ndialetc = \"openai\"\n", "unknown key(s): dialetc"),
    ("[providers.a]\nbase_url = \"https://x/v1\"\napi_key_env = 3\n", "api_key_env must be"),
    ("providers = 3\n", "no [providers.NAME] table"),
    ("[providers]\na = 1\n", "[providers.a] must be a table"),
])
def test_bad_files_give_one_clear_line(tmp_path, text, fragment) -> None:
    with pytest.raises(ProvidersError) as caught:
        load_providers(write(tmp_path, text), {})
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ProvidersError, match="providers file not found"):
        load_providers(tmp_path / "nope.toml")


# -- dialects ------------------------------------------------------------------------------

BODY = {"model": "acme/chat-1:free", "messages": [{"role": "user", "content": "hi"}],
        "stream": False, "tools": [{"type": "function", "function": {"name": "f"}}],
        "response_format": {"type": "json_object"}, "reasoning": {"effort": "low"},
        "plugins": [{"id": "web"}], "provider": {"order": ["a"], "allow_fallbacks": False},
        "transforms": ["middle-out"], "models": ["acme/chat-1:free", "acme/chat-2"],
        "mock": {"chunks": 2}, "x_unknown": [1, {"a": None}]}
PASSED = {k: v for k, v in BODY.items() if k not in ("model", "stream", "models")}


def test_openrouter_dialect_asks_for_usage_and_passes_everything_through() -> None:
    out = orjson.loads(prepare_body(BODY, "openrouter", "acme/chat-1", True))
    assert out == {**PASSED, "model": "acme/chat-1", "stream": True, "usage": {"include": True}}
    assert BODY["model"] == "acme/chat-1:free" and "usage" not in BODY  # input untouched


def test_openrouter_keeps_client_usage_fields_and_drops_stream_options_off_stream() -> None:
    body = {**BODY, "usage": {"include": False, "x": 1}, "stream_options": {"include_usage": True}}
    out = orjson.loads(prepare_body(body, "openrouter", "m", False))
    assert out["usage"] == {"include": True, "x": 1}
    assert "stream_options" not in out and out["stream"] is False


def test_openai_dialect_streams_with_include_usage_and_drops_usage() -> None:
    body = {**BODY, "usage": {"include": True}, "stream_options": {"other": 1}}
    out = orjson.loads(prepare_body(body, "openai", "gpt-x", True))
    assert out == {**PASSED, "model": "gpt-x", "stream": True,
                   "stream_options": {"other": 1, "include_usage": True}}


def test_openai_dialect_non_stream_has_neither() -> None:
    out = orjson.loads(prepare_body({**BODY, "stream_options": {"include_usage": True}},
                                    "openai", "gpt-x", False))
    assert "stream_options" not in out and "usage" not in out and out["stream"] is False


def test_unknown_dialect() -> None:
    with pytest.raises(ValueError):
        prepare_body(BODY, "gemini", "m", True)


POOL = """
[providers.pool]
base_url = "https://api.openai.com/v1"
api_key_env = ["KEY_A", "KEY_B", "KEY_C"]
"""


def test_a_key_pool_keeps_its_set_variables_and_never_shows_a_key(tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING)
    p = load_providers(write(tmp_path, POOL), {"KEY_A": "sk-a-11111111", "KEY_C": "sk-c-33333333"})["pool"]
    assert p.available and p.pooled and [v for v, _ in p.keys] == ["KEY_A", "KEY_C"]
    assert p.headers("sk-c-33333333")["Authorization"] == "Bearer sk-c-33333333"
    assert "KEY_B" in caplog.text and "sk-a" not in caplog.text and "sk-a" not in repr(p)
    off = load_providers(write(tmp_path, POOL), {})["pool"]
    assert not off.available and off.keys == ()


@pytest.mark.parametrize("value", ["[]", '["A", "A"]', '["A", 3]', '[""]'])
def test_a_bad_key_pool_is_refused(tmp_path, value) -> None:
    text = f'[providers.p]\nbase_url = "https://x.example/v1"\napi_key_env = {value}\n'
    with pytest.raises(ProvidersError, match="api_key_env"):
        load_providers(write(tmp_path, text), {"A": "k"})


def test_a_provider_that_serves_the_responses_api(tmp_path) -> None:
    text = ('[providers.oai]\nbase_url = "https://api.openai.com/v1"\napi_key_env = "K"\n'
            'dialect = "openai"\nresponses = true\n')
    p = load_providers(write(tmp_path, text), {"K": "sk-1"})["oai"]
    assert p.responses is True and p.url("responses") == "https://api.openai.com/v1/responses"
    for bad in ('responses = "yes"', 'responses = true\ndialect = "anthropic"'):
        with pytest.raises(ProvidersError, match="responses must be true or false"):
            load_providers(write(tmp_path, f'[providers.x]\nbase_url = "https://x.example/v1"\n{bad}\n'), {})


@pytest.mark.parametrize("value, on", [("", False), ("off", False), ("on", True), ("ON", True), ("1", True)])
def test_the_responses_api_is_the_operator_s_choice(value, on) -> None:
    from upgate.settings import from_env

    assert from_env({"UPGATE_RESPONSES": value} if value else {}).responses is on


def test_a_malformed_responses_setting_stops_the_start() -> None:
    from upgate.settings import SettingsError, from_env

    with pytest.raises(SettingsError, match="UPGATE_RESPONSES must be on or off"):
        from_env({"UPGATE_RESPONSES": "maybe"})
