"""Request-body validation for the proxy routes: pure functions, no I/O.

Integer fields must be JSON integers: orjson gives `100.0` and `1e2` as floats and `true`
as a bool, so a plain type check refuses all three (bool is an int subclass: checked first).
"""
from __future__ import annotations

import array
import gc
import itertools
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


# What a body may hold (docs/security.md). Parsing costs about 30-150 ns per value and the event
# loop serves nobody meanwhile: these keep the worst 20 MB body to a few tens of milliseconds
# (a body of millions of tiny arrays took seconds, and gigabytes). Depth: orjson encodes at most
# 254 levels, so a deeper body would parse, get a hold, and then fail on its way upstream.
MAX_DEPTH = 128
MAX_VALUES = 400_000  # array elements and object members (commas) plus containers
MAX_CONTAINERS = 100_000  # arrays and objects: the costliest values to build and to collect
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


class BodyShape:
    """Bounds a JSON body's nesting depth and value count from its bytes, piece by piece as they
    arrive (so the scan is spread over the reads, never one stall), before it is parsed. Every
    step is a C-speed pass (count, replace, split, translate), no Python loop per byte.

    Counting brackets and commas of the raw bytes overcounts (strings may hold them): while those
    counts stay under the limits nothing else is done, which is every ordinary body. Past them
    (code or CSV in a prompt, or a hostile body) the pieces are scanned exactly, outside strings
    only, from the first byte on."""

    __slots__ = ("_raw", "_values", "_opens", "_exact", "_in_str", "_carry", "_depth",
                 "_containers")

    def __init__(self) -> None:
        self._raw: list[bytes] | None = []  # pieces seen while counting raw
        self._values = self._opens = 0
        self._exact = False
        self._in_str = False
        self._carry = b""  # a backslash that escapes the next piece's first byte
        self._depth = self._containers = 0

    def feed(self, piece: bytes) -> None:
        """Raises GatewayError(invalid_request) once the body is past a limit."""
        if not self._exact:
            opens = piece.count(b"[") + piece.count(b"{")
            self._opens += opens
            self._values += piece.count(b",") + opens
            if self._opens < MAX_DEPTH and self._values <= MAX_VALUES:
                self._raw.append(piece)
                return
            self._exact, seen, self._raw, self._values = True, self._raw, None, 0
            for p in seen:
                self._scan(p)
        self._scan(piece)

    def _scan(self, piece: bytes) -> None:
        if self._carry:
            piece, self._carry = self._carry + piece, b""
        if b"\\" in piece:
            if piece.endswith(b"\\") and (len(piece) - len(piece.rstrip(b"\\"))) % 2:
                piece, self._carry = piece[:-1], b"\\"
            # escaped backslashes, then escaped quotes: every quote left opens or closes a string
            piece = piece.replace(b"\\\\", b"").replace(b'\\"', b"")
        parts = piece.split(b'"')
        outside = b"".join(parts[1 if self._in_str else 0::2])
        if len(parts) % 2 == 0:
            self._in_str = not self._in_str
        opens = outside.count(b"[") + outside.count(b"{")
        self._containers += opens
        self._values += outside.count(b",") + opens
        if self._containers > MAX_CONTAINERS or self._values > MAX_VALUES:
            raise _bad(f"The request body holds too many values (at most {MAX_VALUES:,} values and "
                       f"{MAX_CONTAINERS:,} arrays and objects).")
        depth = self._depth
        if depth + opens > MAX_DEPTH:  # deep enough to need the running depth in this piece
            steps = array.array("b", outside.translate(_BRACKETS, _NOT_BRACKETS))
            if max(itertools.accumulate(steps, initial=depth)) > MAX_DEPTH:
                raise _bad(f"The request body nests deeper than {MAX_DEPTH} levels.")
        self._depth = depth + opens - outside.count(b"]") - outside.count(b"}")


def parse_json(raw: bytes, shape_checked: bool = False) -> dict:
    """The body as a dict. Its shape is checked first unless the caller fed every piece to a
    BodyShape already. The garbage collector is kept out of the parse: every container orjson
    builds counts toward a collection, and a collection walks them all, again and again while
    a large body is built."""
    if not shape_checked:
        BodyShape().feed(raw)
    enabled = gc.isenabled()
    gc.disable()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _bad("The request body is not valid JSON.") from None
    finally:
        if enabled:
            gc.enable()
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


