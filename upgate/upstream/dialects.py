"""Turn a client's request body into the body one provider expects.

Everything the client sent passes through unchanged (tools, response_format, reasoning,
plugins, provider, transforms, unknown fields), except:
- `model` becomes the catalog's upstream model;
- `models` is dropped: the gateway runs the fallback list itself, and a provider doing its
  own fallback could answer with a model the hold was not priced for;
- on the generating routes (chat/completions, completions) only: `stream` becomes what the
  gateway chose, and usage is always asked for, in the provider's dialect, so settlement has
  real numbers. Embeddings have no stream and always report usage, and OpenAI refuses
  unknown fields there: their body gets nothing added.

The `anthropic` dialect speaks the Messages API (upstream/anthropic.py): its request body,
its answer and its stream are translated at this edge, so everything above sees chat
completions. It serves the chat route only (a Messages client's body goes as it is).
"""

from typing import Any

import orjson

from upgate.upstream import anthropic, responses
from upgate.upstream.sse import SSEParser

DIALECTS = ("openrouter", "openai", "anthropic")
GENERATING = ("chat/completions", "completions")
RESPONSES = "responses"  # the wire of a provider with `responses = true`, for a Responses client  # the routes that stream and take usage options


def prepare_body(body: dict, dialect: str, upstream_model: str, stream_upstream: bool,
                 path: str = "chat/completions") -> bytes:
    """The JSON bytes to POST to `path` (relative to the provider's base URL). `body` itself is
    left untouched (fallback reuses it)."""
    if dialect == RESPONSES:  # a Responses client's own body, to a provider that speaks it
        return orjson.dumps(responses.request_body(body, upstream_model, stream_upstream))
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    if dialect == "anthropic":
        if path != "chat/completions":
            raise ValueError(f"the anthropic dialect serves chat/completions only, not {path}")
        return orjson.dumps(anthropic.request_body(body, upstream_model, stream_upstream))
    out: dict[str, Any] = dict(body)
    out["model"] = upstream_model
    out.pop("models", None)
    if path not in GENERATING:  # embeddings: nothing added
        return orjson.dumps(out)
    out["stream"] = stream_upstream
    if dialect == "openrouter":
        usage = out.get("usage")
        out["usage"] = {**usage, "include": True} if isinstance(usage, dict) else {"include": True}
        if not stream_upstream:
            out.pop("stream_options", None)  # only valid on streams
    elif dialect == "openai":
        out.pop("usage", None)  # openrouter-only; OpenAI rejects unknown top-level fields
        if stream_upstream:
            options = out.get("stream_options")
            out["stream_options"] = (
                {**options, "include_usage": True} if isinstance(options, dict)
                else {"include_usage": True})
        else:
            out.pop("stream_options", None)  # "stream_options is only allowed when stream is true"
    return orjson.dumps(out)


def request_headers(dialect: str, headers: dict[str, str]) -> dict[str, str]:
    """A provider's request headers in its dialect: the Messages API takes its key in x-api-key,
    with anthropic-version, never a bearer token."""
    if dialect != "anthropic":
        return headers
    out = {k: v for k, v in headers.items() if k != "Authorization"}
    auth = headers.get("Authorization", "")
    if auth.startswith("Bearer "):
        out["x-api-key"] = auth[len("Bearer "):]
    out["anthropic-version"] = anthropic.VERSION
    return out


def stream_parser(dialect: str):
    """The parser of a provider's stream: `.feed(bytes)` → chat-chunk payloads (and [DONE])."""
    if dialect == RESPONSES:
        return responses.StreamParser()
    return anthropic.StreamParser() if dialect == "anthropic" else SSEParser()


def decode_answer(dialect: str, raw: bytes):
    """A provider's JSON answer as a chat answer (ValueError when it is not JSON)."""
    if dialect == RESPONSES:
        return responses.chat_answer(raw)
    return anthropic.chat_answer(raw) if dialect == "anthropic" else orjson.loads(raw)
