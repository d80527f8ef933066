"""Streamed chunks → one non-stream object that the openai client's models accept."""

import asyncio

import orjson
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion

from upgate.mock.upstream import serve
from upgate.upstream.assemble import Assembler, assemble
from upgate.upstream.client import UpstreamClient
from upgate.upstream.sse import SSEParser

pytestmark = pytest.mark.timeout(60)

HEAD = {"id": "gen-1", "object": "chat.completion.chunk", "created": 1700000000,
        "model": "openai/gpt-4o-mini", "provider": "OpenAI", "system_fingerprint": "fp_1"}


def chunk(delta=None, finish=None, index=0, **top):
    choices = [] if delta is None and finish is None else [
        {"index": index, "delta": delta or {}, "finish_reason": finish, "logprobs": None}]
    return {**HEAD, "choices": choices, **top}


def test_content_usage_and_provider() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    doc = assemble([
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop", native_finish_reason="stop"),
        chunk(usage=usage),
    ])
    parsed = ChatCompletion.model_validate(doc)
    assert parsed.object == "chat.completion"
    assert parsed.id == "gen-1" and parsed.model == "openai/gpt-4o-mini"
    assert parsed.system_fingerprint == "fp_1"
    assert parsed.choices[0].message.content == "Hello"
    assert parsed.choices[0].message.role == "assistant"
    assert parsed.choices[0].finish_reason == "stop"
    assert parsed.usage.total_tokens == 5
    assert doc["provider"] == "OpenAI"
    assert doc["native_finish_reason"] == "stop"


def test_tool_calls_merge_by_index_with_concatenated_arguments() -> None:
    doc = assemble([
        chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function",
             "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "get_time", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Tehran"}'}}]}),
        chunk({}, "tool_calls"),
    ])
    message = ChatCompletion.model_validate(doc).choices[0].message
    assert message.content is None
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("call_a", "get_weather", '{"city": "Tehran"}'), ("call_b", "get_time", "{}")]


def test_refusal_reasoning_and_several_choices() -> None:
    doc = assemble([
        chunk({"role": "assistant", "reasoning": "think "}, index=0),
        chunk({"role": "assistant", "refusal": "I can't"}, index=1),
        chunk({"reasoning": "more", "content": "ok"}, index=0),
        chunk({"refusal": " help."}, "stop", index=1),
        chunk({}, "length", index=0),
    ])
    parsed = ChatCompletion.model_validate(doc)
    first, second = parsed.choices
    assert (first.index, first.message.content, first.finish_reason) == (0, "ok", "length")
    assert doc["choices"][0]["message"]["reasoning"] == "think more"
    assert second.message.refusal == "I can't help." and second.message.content == ""
    assert "usage" not in doc


def test_logprobs_are_concatenated() -> None:
    lp = lambda t: {"content": [{"token": t, "logprob": -0.1, "bytes": None, "top_logprobs": []}]}  # noqa: E731
    chunks = [chunk({"content": "a"}), chunk({"content": "b"}, "stop")]
    chunks[0]["choices"][0]["logprobs"] = lp("a")
    chunks[1]["choices"][0]["logprobs"] = lp("b")
    parsed = ChatCompletion.model_validate(assemble(chunks))
    assert [t.token for t in parsed.choices[0].logprobs.content] == ["a", "b"]


def test_legacy_text_completion() -> None:
    head = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
    assembler = Assembler()
    for piece, finish in (("tok0 ", None), ("tok1 ", None), ("", "length")):
        assembler.add({**head, "choices": [{"index": 0, "text": piece, "logprobs": None,
                                            "finish_reason": finish}]})
    assembler.add({**head, "choices": [],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
    parsed = Completion.model_validate(assembler.result())
    assert parsed.object == "text_completion"
    assert parsed.choices[0].text == "tok0 tok1 " and parsed.choices[0].finish_reason == "length"
    assert parsed.usage.completion_tokens == 2


def test_missing_finish_reason_and_ids_still_validate() -> None:
    doc = assemble([{"choices": [{"index": 0, "delta": {"content": "x"}}]}])
    assert ChatCompletion.model_validate(doc).choices[0].finish_reason == "stop"


def test_a_real_mock_stream_assembles_like_the_non_stream_answer() -> None:
    async def fetch(stream: bool, mock: dict) -> list[dict] | dict:
        server = await serve(0)
        client = UpstreamClient(max_clients=4, silence_s=10)
        body = {"model": "mock/chat-1", "stream": stream, "n": 2,
                "messages": [{"role": "user", "content": "abcdefgh"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                "stream_options": {"include_usage": True}, "mock": mock}
        try:
            call = client.open(f"http://127.0.0.1:{server.port}/v1/chat/completions",
                               orjson.dumps(body), {})
            await call.start()
            raw = await call.body()
        finally:
            client.close()
            server.stop()
        if not stream:
            return orjson.loads(raw)
        parser = SSEParser()
        return [orjson.loads(e) for e in parser.feed(raw) + parser.flush() if e != b"[DONE]"]

    for mock in ({"chunks": 3}, {"chunks": 3, "tool_calls": True}):
        streamed = assemble(asyncio.run(fetch(True, mock)))
        direct = asyncio.run(fetch(False, mock))
        ChatCompletion.model_validate(streamed)
        for doc in (streamed, direct):
            doc.pop("id"), doc.pop("created")
        assert streamed == direct
