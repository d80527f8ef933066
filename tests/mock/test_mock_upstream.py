"""The mock provider, run as `main(port)` in a subprocess and driven by the openai client."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from upgate.mock.upstream import prompt_tokens

pytestmark = pytest.mark.timeout(60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mock_url():
    port = _free_port()
    root = str(Path(__file__).resolve().parents[2])  # importable without an install
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-c", f"from upgate.mock.upstream import main; main({port})"],
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


def _events(url: str, mock: dict, **body) -> list:
    """The stream's events as sent, with the per-request id and clock taken out."""
    doc = {"model": "mock/chat-1", "messages": MESSAGES, "stream": True, "mock": mock, **body}
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(doc).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        raw = response.read().decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = []
    for block in raw.split("\n\n")[:-2]:
        event = json.loads(block.removeprefix("data: "))
        events.append({k: v for k, v in event.items() if k not in ("id", "created")})
    return events


@pytest.mark.parametrize("body", [{}, {"stream_options": {"include_usage": True}, "n": 2}])
def test_a_paced_stream_sends_what_an_unpaced_one_does(url, body) -> None:
    # a paced stream with no fault switch is written from timers, not the coroutine loop
    unpaced = _events(url, {"chunks": 4}, **body)
    paced = _events(url, {"chunks": 4, "chunk_delay_ms": 5}, **body)
    assert paced == unpaced
    assert len(unpaced) == 4 * body.get("n", 1) + body.get("n", 1) + ("stream_options" in body)
    assert get(url + "/_mock/stats")["active"] == 0


def test_a_client_leaving_a_paced_stream_is_counted_and_released(url) -> None:
    doc = {"model": "mock/chat-1", "messages": MESSAGES, "stream": True,
           "mock": {"chunks": 1000, "chunk_delay_ms": 5}}
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(doc).encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        seen = b""
        while seen.count(b"data: ") < 3:  # the stream is under way
            seen += s.recv(65536)
    for _ in range(200):  # the mock notices the close at its next write or read
        stats = get(url + "/_mock/stats")
        if stats["disconnects"] == 1 and stats["active"] == 0:
            break
        time.sleep(0.05)
    assert (stats["disconnects"], stats["active"]) == (1, 0)
