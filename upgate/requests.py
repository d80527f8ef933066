"""Request-body validation for the proxy routes: pure functions, no I/O.

Integer fields must be JSON integers: orjson gives `100.0` and `1e2` as floats and `true`
as a bool, so a plain type check refuses all three (bool is an int subclass: checked first).
"""
from __future__ import annotations

from dataclasses import dataclass

import orjson

from upgate.errors import GatewayError

INT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of")
MAX_FALLBACKS = 5
_BOUNDS = {"n": (1, 16), "best_of": (1, 16)}
_INT_MAX = 2**31 - 1  # past this no model's limit is meaningful; keeps hold maths bounded


def _bad(message: str) -> GatewayError:
    return GatewayError("invalid_request", message)


@dataclass(frozen=True)
class ProxyRequest:
    """What the handler needs from a validated body; the body itself is forwarded."""

    body: dict
    model_ids: list[str]  # target first, then the fallbacks, without duplicates
    stream: bool


def parse_json(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _bad("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.")
    return body


def validate(body: dict, route: str) -> ProxyRequest:
    """route: "chat" | "completions" | "embeddings"."""
    model = body.get("model")
    if model is None:
        raise _bad("`model` is required.")
    if not isinstance(model, str) or not model:
        raise _bad("`model` must be a non-empty string.")
    for name in INT_FIELDS:
        if name in body and body[name] is not None:
            v = body[name]
            if type(v) is not int:
                raise _bad(f"`{name}` must be a JSON integer (not a string, decimal or exponent).")
            lo, hi = _BOUNDS.get(name, (1, _INT_MAX))
            if not lo <= v <= hi:
                raise _bad(f"`{name}` must be between {lo} and {hi}.")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("`stream` must be a boolean.")
    if route == "embeddings" and stream:
        raise _bad("Embeddings cannot be streamed.")
    _check_shapes(body, route)
    ids = [model]
    fallbacks = body.get("models")
    if fallbacks is not None:
        if not isinstance(fallbacks, list) or not fallbacks or len(fallbacks) > MAX_FALLBACKS:
            raise _bad(f"`models` must be a list of 1 to {MAX_FALLBACKS} model ids.")
        for m in fallbacks:
            if not isinstance(m, str) or not m:
                raise _bad("`models` must contain model id strings.")
            if m not in ids:
                ids.append(m)
    return ProxyRequest(body=body, model_ids=ids, stream=stream)


def _check_shapes(body: dict, route: str) -> None:
    if route == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad("`messages` must be a non-empty list.")
        if not all(isinstance(m, dict) for m in messages):
            raise _bad("Each message must be an object.")
    elif route == "completions":
        if "prompt" in body and not isinstance(body["prompt"], (str, list)):
            raise _bad("`prompt` must be a string or a list.")
    elif route == "embeddings":
        if not isinstance(body.get("input"), (str, list)):
            raise _bad("`input` must be a string or a list.")
    plugins = body.get("plugins")
    if plugins is not None and (not isinstance(plugins, list) or not all(isinstance(p, dict) for p in plugins)):
        raise _bad("`plugins` must be a list of objects.")
    for name, kind in (("web_search_options", dict), ("reasoning", dict), ("provider", dict),
                       ("response_format", dict), ("tools", list), ("transforms", list)):
        if body.get(name) is not None and not isinstance(body[name], kind):
            raise _bad(f"`{name}` must be {'an object' if kind is dict else 'a list'}.")


def wants_web_search(body: dict, model_id: str) -> bool:
    if model_id.endswith(":online") or body.get("web_search_options") is not None:
        return True
    return any(p.get("id") == "web" for p in body.get("plugins") or ())
