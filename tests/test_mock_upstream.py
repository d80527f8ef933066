"""The mock provider, run as `main(port)` in a subprocess and driven by the openai client."""

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from upgate.mock_upstream import prompt_tokens

pytestmark = pytest.mark.timeout(60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mock_url():
    port = _free_port()
    root = str(Path(__file__).resolve().parent.parent)  # importable without an install
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-c", f"from upgate.mock_upstream import main; main({port})"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = proc.stdout.readline()  # printed once the socket is listening
        assert f"127.0.0.1:{port}" in line, line
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def url(mock_url):
    post(mock_url + "/_mock/reset", {})
    return mock_url


@pytest.fixture
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


def post(url: str, doc: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


MESSAGES = [{"role": "system", "content": "be brief"},  # 8 characters
            {"role": "user", "content": [{"type": "text", "text": "count to five"}]}]  # 13


def test_prompt_tokens_is_characters_over_four() -> None:
    assert prompt_tokens(MESSAGES) == 21 // 4
    assert prompt_tokens("") == 1
    assert prompt_tokens(["abcd", "efgh"]) == 2
    assert prompt_tokens([1, 2, 3]) == 3


def test_chat_non_stream(client) -> None:
    completion = client.chat.completions.create(model="mock/chat-1", messages=MESSAGES)
    assert completion.object == "chat.completion"
    assert completion.model == "mock/chat-1"
    assert completion.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4 "
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (5, 5)


def test_chat_stream_with_openai_usage_option(client) -> None:
    chunks = list(client.chat.completions.create(
        model="mock/chat-1", messages=MESSAGES, stream=True,
        stream_options={"include_usage": True}, extra_body={"mock": {"chunks": 3}}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 "
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_chat_stream_with_openrouter_usage_field(client) -> None:
    chunks = list(client.chat.completions.create(
        model="mock/chat-1", messages=MESSAGES, stream=True,
        extra_body={"usage": {"include": True}}))
    assert chunks[-1].usage.total_tokens == 5 + 5


def test_chat_stream_without_usage_request_has_no_usage(client) -> None:
    chunks = list(client.chat.completions.create(model="mock/chat-1", messages=MESSAGES,
                                                  stream=True))
    assert all(c.usage is None for c in chunks)


def test_max_tokens_caps_the_chunks(client) -> None:
    completion = client.chat.completions.create(model="mock/chat-1", messages=MESSAGES,
                                                max_tokens=2)
    assert completion.choices[0].message.content == "tok0 tok1 "
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 2


def test_n_choices_multiply_completion_tokens(client) -> None:
    completion = client.chat.completions.create(model="mock/chat-1", messages=MESSAGES, n=2,
                                                extra_body={"mock": {"chunks": 2}})
    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.usage.completion_tokens == 4


def test_tool_calls(client) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    completion = client.chat.completions.create(
        model="mock/chat-1", messages=MESSAGES, tools=tools,
        extra_body={"mock": {"tool_calls": True, "chunks": 2}})
    call = completion.choices[0].message.tool_calls[0]
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"t": "tok0 tok1 "}
    assert completion.choices[0].finish_reason == "tool_calls"


def test_legacy_completions(client) -> None:
    completion = client.completions.create(model="mock/instruct-1", prompt="abcdefgh",
                                           extra_body={"mock": {"chunks": 2}})
    assert completion.choices[0].text == "tok0 tok1 "
    assert completion.usage.prompt_tokens == 2
    chunks = list(client.completions.create(model="mock/instruct-1", prompt="abcdefgh",
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"mock": {"chunks": 2}}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "tok0 tok1 "
    assert chunks[-1].usage.completion_tokens == 2


def test_embeddings_are_deterministic_in_both_encodings(client, url) -> None:
    first = client.embeddings.create(model="mock/embed-1", input=["hello world", "bye"])
    again = client.embeddings.create(model="mock/embed-1", input=["hello world", "bye"])
    assert [d.embedding for d in first.data] == [d.embedding for d in again.data]
    assert len(first.data) == 2 and len(first.data[0].embedding) == 8
    assert first.usage.prompt_tokens == (11 + 3) // 4
    as_floats = post(url + "/v1/embeddings", {"model": "mock/embed-1", "input": "hello world",
                                               "encoding_format": "float", "dimensions": 4})
    assert len(as_floats["data"][0]["embedding"]) == 4
    assert as_floats["data"][0]["embedding"] == pytest.approx(first.data[0].embedding[:4])


def test_models(client) -> None:
    assert "mock/chat-1" in [m.id for m in client.models.list()]


def test_error_status_names_the_upstream(client, url) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="mock/chat-1", messages=MESSAGES,
                                       extra_body={"mock": {"status": 429}})
    message = caught.value.body["message"]
    port = url.rsplit(":", 1)[1]
    for secret in (f"127.0.0.1:{port}", "sk-mock-SECRET123", "org-mockorg"):
        assert secret in message
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="mock/chat-1", messages=MESSAGES,
            extra_body={"mock": {"status": 400, "error": {"message": "no", "code": "bad_param"}}})
    assert caught.value.body == {"message": "no", "type": "mock_error", "param": None,
                                 "code": "bad_param"}


def test_garbage_and_echo(client, url) -> None:
    request = urllib.request.Request(
        url + "/v1/chat/completions", method="POST",
        data=json.dumps({"model": "m", "messages": [], "mock": {"garbage": "oops"}}).encode())
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200 and response.read() == b"oops"
    echoed = post(url + "/v1/chat/completions",
                  {"model": "m", "messages": [], "plugins": [{"id": "web"}],
                   "provider": {"order": ["x"]}, "mock": {"echo": True, "no_usage": True}})
    assert echoed["mock_echo"]["plugins"] == [{"id": "web"}]
    assert echoed["mock_echo"]["provider"] == {"order": ["x"]}
    assert "usage" not in echoed


def test_config_defaults_stats_and_reset(client, url) -> None:
    post(url + "/_mock/config", {"chunks": 2})
    post(url + "/_mock/config", {"no_usage": True})
    completion = client.chat.completions.create(model="mock/chat-1", messages=MESSAGES,
                                                extra_body={"mock": {"no_usage": False}})
    assert completion.choices[0].message.content == "tok0 tok1 "  # default from config
    assert completion.usage is not None  # the body's switch wins over the default
    stats = get(url + "/_mock/stats")
    assert stats["requests"] == 1 and stats["connections"] >= 1 and stats["active"] == 0
    assert stats["last_body"]["mock"] == {"no_usage": False}
    post(url + "/_mock/config", {})
    completion = client.chat.completions.create(model="mock/chat-1", messages=MESSAGES)
    assert completion.usage.completion_tokens == 5
    post(url + "/_mock/reset", {})
    assert get(url + "/_mock/stats")["requests"] == 0


def test_bad_json_body_is_an_openai_style_400(url) -> None:
    request = urllib.request.Request(url + "/v1/chat/completions", data=b"{nope", method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 400
    assert "message" in json.load(caught.value)["error"]
