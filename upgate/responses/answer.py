"""A chat-completions answer → the Responses API's Response object (what Codex and the openai
SDKs read), and the pieces the stream encoder shares with it: output items, usage, status."""
from __future__ import annotations

import time

import orjson


def usage(chat_usage: dict | None) -> dict:
    """Responses usage from a chat usage object (cached tokens are inside input_tokens in both)."""
    u = chat_usage if isinstance(chat_usage, dict) else {}
    prompt, completion = _n(u.get("prompt_tokens")), _n(u.get("completion_tokens"))
    pd = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
    cd = u.get("completion_tokens_details") if isinstance(u.get("completion_tokens_details"), dict) else {}
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": _n(pd.get("cached_tokens"))},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": _n(cd.get("reasoning_tokens"))},
            "total_tokens": prompt + completion}


def _n(value) -> int:
    return value if type(value) is int and value >= 0 else 0


class Shape:
    """What every Response of one request shares: its id, the model as the client named it, the
    request's settings echoed back, and item ids."""

    def __init__(self, response_id: str, model: str, request: dict, custom_tools=frozenset()) -> None:
        self.id, self.model, self.request = response_id, model, request
        self.custom_tools = custom_tools
        self.created = int(time.time())
        self._items = 0

    def item_id(self, prefix: str) -> str:
        self._items += 1
        return f"{prefix}_{self.id.removeprefix('resp_')}{self._items:02d}"

    def response(self, status: str, output: list, usage_obj: dict | None = None, error: dict | None = None,
                 incomplete: str | None = None) -> dict:
        req = self.request
        reasoning = req.get("reasoning") if isinstance(req.get("reasoning"), dict) else {}
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": error, "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": req.get("instructions"), "max_output_tokens": req.get("max_output_tokens"),
            "model": self.model, "output": output,
            "parallel_tool_calls": req.get("parallel_tool_calls", True), "previous_response_id": None,
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "store": False, "temperature": req.get("temperature"),
            "text": req.get("text") if isinstance(req.get("text"), dict) else {"format": {"type": "text"}},
            "tool_choice": req.get("tool_choice", "auto"), "tools": req.get("tools") or [],
            "top_p": req.get("top_p"), "truncation": "disabled", "usage": usage_obj,
            "user": req.get("user"), "metadata": req.get("metadata") or {},
        }

    # ---- output items, finished
    def message(self, item_id: str, text: str, status: str = "completed") -> dict:
        return {"id": item_id, "type": "message", "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    def call(self, item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
        """A function_call item, or a custom_tool_call for a custom tool (its `input` argument)."""
        if name in self.custom_tools:
            return {"id": item_id, "type": "custom_tool_call", "status": status, "call_id": call_id,
                    "name": name, "input": custom_input(arguments)}
        return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id,
                "name": name, "arguments": arguments}

    def reasoning(self, item_id: str, text: str) -> dict:
        return {"id": item_id, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}] if text else []}


def custom_input(arguments: str) -> str:
    """A custom tool's raw input, from the one-parameter function it was offered upstream as."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return arguments
    return value.get("input", "") if isinstance(value, dict) and isinstance(value.get("input"), str) else arguments


def status_of(finish: str | None) -> tuple[str, str | None]:
    """(status, incomplete reason) for a chat finish_reason."""
    if finish == "length":
        return "incomplete", "max_output_tokens"
    if finish == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def from_chat(obj: dict, shape: Shape) -> dict:
    """The Response for a `chat.completion` (its first choice)."""
    choices = obj.get("choices") if isinstance(obj.get("choices"), list) else []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    output = []
    if isinstance(message.get("reasoning"), str) and message["reasoning"]:
        output.append(shape.reasoning(shape.item_id("rs"), message["reasoning"]))
    if isinstance(message.get("content"), str) and message["content"]:
        output.append(shape.message(shape.item_id("msg"), message["content"]))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            output.append(shape.call(shape.item_id("fc"), call.get("id") or shape.item_id("call"),
                                     fn.get("name") or "", fn.get("arguments") or ""))
    status, reason = status_of(choice.get("finish_reason"))
    out = shape.response(status, output, usage(obj.get("usage")), incomplete=reason)
    if "svc" in obj:
        out["svc"] = obj["svc"]
    return out
