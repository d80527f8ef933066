"""Golden event sequences of Responses streams (upgate/responses/events.py), from the chat
chunks the proxy's relay feeds the encoder: text, a function call, a custom tool call,
reasoning then text, and a stream cut part-way."""
from __future__ import annotations

import orjson

from upgate.responses.answer import Shape
from upgate.responses.events import EventEncoder

USAGE = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3,
                                  "prompt_tokens_details": {"cached_tokens": 2},
                                  "completion_tokens_details": {"reasoning_tokens": 1}}}


def delta(**d) -> dict:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def finish(reason: str) -> dict:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def events(chunks: list[dict], custom=frozenset(), end: bool = True, cut: dict | None = None) -> list[dict]:
    enc = EventEncoder(Shape("resp_abc", "gpt-6.2-sol", {"model": "gpt-6.2-sol"}, custom))
    raw = b"".join(enc.chunk(c) for c in chunks)
    raw += enc.error(cut) if cut else enc.end() if end else b""
    out = []
    for block in raw.decode().strip().split("\n\n"):
        name, data = block.split("\n")
        ev = orjson.loads(data[len("data: "):])
        assert name == "event: " + ev["type"]
        out.append(ev)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


def test_text():
    evs = events([delta(role="assistant", content="Hel"), delta(content="lo"), finish("stop"), USAGE])
    assert [e["type"] for e in evs] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    assert evs[0]["response"]["status"] == "in_progress" and evs[0]["response"]["model"] == "gpt-6.2-sol"
    assert evs[6]["text"] == "Hello"
    done = evs[-1]["response"]
    assert done["status"] == "completed" and done["output"] == [evs[8]["item"]]
    assert done["output"][0]["content"][0]["text"] == "Hello"
    assert done["usage"] == {"input_tokens": 7, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 3,
                             "output_tokens_details": {"reasoning_tokens": 1}, "total_tokens": 10}


def test_a_function_call():
    evs = events([delta(role="assistant", tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                                       "function": {"name": "exec_command", "arguments": ""}}]),
                  delta(tool_calls=[{"index": 0, "function": {"arguments": '{"cmd":'}}]),
                  delta(tool_calls=[{"index": 0, "function": {"arguments": '"ls"}'}}]),
                  finish("tool_calls"), USAGE])
    assert [e["type"] for e in evs] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert evs[2]["item"] == {"id": evs[2]["item"]["id"], "type": "function_call", "status": "in_progress",
                              "call_id": "call_1", "name": "exec_command", "arguments": ""}
    assert evs[5]["arguments"] == '{"cmd":"ls"}' and evs[6]["item"]["status"] == "completed"
    assert evs[-1]["response"]["output"][0]["arguments"] == '{"cmd":"ls"}'


def test_a_custom_tool_call_comes_back_as_one():
    """Codex's `exec` was offered upstream as a function of one string, `input`."""
    evs = events([delta(tool_calls=[{"index": 0, "id": "call_2", "function": {"name": "exec", "arguments": '{"input":'}}]),
                  delta(tool_calls=[{"index": 0, "function": {"arguments": '"text(1)"}'}}]),
                  finish("tool_calls"), USAGE], custom=frozenset({"exec"}))
    assert [e["type"] for e in evs][2:] == [
        "response.output_item.added", "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done", "response.output_item.done", "response.completed"]
    item = evs[-2]["item"]
    assert item["type"] == "custom_tool_call" and item["input"] == "text(1)" and item["call_id"] == "call_2"


def test_reasoning_then_text():
    evs = events([delta(reasoning="Think"), delta(reasoning="ing."), delta(content="Done."), finish("stop"), USAGE])
    assert [e["type"] for e in evs] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    output = evs[-1]["response"]["output"]
    assert [o["type"] for o in output] == ["reasoning", "message"]
    assert output[0]["summary"] == [{"type": "summary_text", "text": "Thinking."}]
    assert evs[9]["output_index"] == 1


def test_a_cut_stream_ends_with_response_failed():
    evs = events([delta(role="assistant", content="tok0 "), delta(content="tok1 ")],
                 cut={"code": "upstream_error", "message": "The provider's stream failed part-way."})
    assert [e["type"] for e in evs] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.failed"]
    failed = evs[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "upstream_error"
    assert failed["output"][0]["content"][0]["text"] == "tok0 tok1 "


def test_a_length_stop_is_incomplete():
    evs = events([delta(content="a"), finish("length"), USAGE])
    assert evs[-1]["type"] == "response.incomplete"
    assert evs[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
