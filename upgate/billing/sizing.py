"""Hold sizing and cost: pure functions, no I/O.

A hold is what a request could cost at most, reserved before it goes upstream:

    estimated prompt tokens × prompt price
  + output tokens × completion price × max(n, best_of, 1)
  + request fee + web-search fee (`:online`, a `{"id": "web"}` plugin, or web_search_options)

Output tokens are the largest of max_tokens / max_completion_tokens / max_output_tokens; a
smaller max_tokens gives a smaller hold. Reasoning is inside that limit on every API the
gateway serves (the Messages API's thinking.budget_tokens is part of max_tokens; OpenAI's
max_completion_tokens and the Responses API's max_output_tokens count reasoning tokens;
OpenRouter's reasoning.max_tokens must stay below max_tokens), so it adds nothing. A request
that sets no limit holds the spec's default of 4096 plus its reasoning budget
(`reasoning.max_tokens` when it is an integer): the answer may then spend both. Output is capped, per choice, at the
catalog's `max_output_tokens` for the model (it cannot produce more, and a client able to pay for
any answer it can give must not get a 402; the body still goes upstream unchanged). Embeddings
hold their input only. With a `models` fallback list every entry is priced, each with its own
cap, and the most expensive is held. Settle charges the real
consumption afterwards (``cost_micro``), even above the hold. Holds price every prompt token at
the full prompt price: cached tokens are known only from the provider's answer.

The prompt estimate is conservative (about three characters a token, rounded up, plus a few
tokens a message) but bounded: image, audio and file parts count a fixed amount each, never
their base64 bytes, and the estimate never exceeds the model's context length when known.
"""
from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, localcontext

import orjson

from upgate.billing import money

DEFAULT_OUTPUT_TOKENS = 4096
CHARS_PER_TOKEN = 3
MESSAGE_OVERHEAD_TOKENS = 4  # role and separators of one chat message
IMAGE_PART_TOKENS = 1600  # one image, any size (a 1-megapixel image is about 800-1600 tokens)
AUDIO_PART_TOKENS = 4000
FILE_PART_TOKENS = 8000  # a document part (e.g. a PDF): a fixed, generous estimate
OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")

_IMAGE_TYPES = {"image_url", "input_image", "image"}
_AUDIO_TYPES = {"input_audio", "audio"}
_FILE_TYPES = {"file", "input_file", "document"}
_TEXT_TYPES = {"text", "input_text", "output_text", "refusal"}


def _int(value) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _chars_tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def _part_tokens(part) -> int:
    """One element of a message's `content` list."""
    if isinstance(part, str):
        return _chars_tokens(len(part))
    if not isinstance(part, dict):
        return 0
    kind = part.get("type")
    if kind in _IMAGE_TYPES or "image_url" in part:
        return IMAGE_PART_TOKENS
    if kind in _AUDIO_TYPES or "input_audio" in part:
        return AUDIO_PART_TOKENS
    if kind in _FILE_TYPES or "file" in part:
        return FILE_PART_TOKENS
    text = part.get("text")
    if isinstance(text, str):
        return _chars_tokens(len(text))
    if kind in _TEXT_TYPES:
        return 0
    # an unknown part: count its text-like fields, never long opaque strings (base64 data)
    n = 0
    for value in part.values():
        if isinstance(value, str) and len(value) < 4096:
            n += len(value)
    return _chars_tokens(n)


def _content_tokens(content) -> int:
    if isinstance(content, str):
        return _chars_tokens(len(content))
    if isinstance(content, list):
        return sum(_part_tokens(p) for p in content)
    return 0


def _json_tokens(value) -> int:
    try:
        return _chars_tokens(len(orjson.dumps(value)))
    except TypeError:
        return 0


def _input_tokens(value) -> int:
    """`prompt` (legacy completions) or `input` (embeddings): text, token ids, or lists of them."""
    if isinstance(value, str):
        return _chars_tokens(len(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return 1  # one token id
    if isinstance(value, list):
        return sum(_input_tokens(v) for v in value)
    if isinstance(value, dict):
        return _part_tokens(value)
    return 0


def prompt_tokens(body: dict) -> int:
    """A conservative estimate of the prompt's tokens from the request body."""
    n = 0
    messages = body.get("messages")
    if isinstance(messages, list):
        for m in messages:
            if not isinstance(m, dict):
                continue
            n += MESSAGE_OVERHEAD_TOKENS + _content_tokens(m.get("content"))
            if isinstance(m.get("name"), str):
                n += _chars_tokens(len(m["name"]))
            for call in m.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    n += _chars_tokens(len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or "")))
    for field in ("prompt", "input", "suffix"):
        if field in body:
            n += _input_tokens(body[field])
    for field in ("tools", "functions", "response_format"):
        if body.get(field) is not None:
            n += _json_tokens(body[field])
    return n


def output_tokens(body: dict) -> int:
    """The largest of the max_tokens family, else the spec's default of 4096."""
    values = [v for v in (_int(body.get(f)) for f in OUTPUT_FIELDS) if v is not None]
    return max(values) if values else DEFAULT_OUTPUT_TOKENS


def limited(body: dict) -> bool:
    """The request sets an output limit (the max_tokens family), reasoning inside it."""
    return any(_int(body.get(f)) is not None for f in OUTPUT_FIELDS)


def reasoning_tokens(body: dict) -> int:
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict):
        return _int(reasoning.get("max_tokens")) or 0
    return 0


def choices(body: dict) -> int:
    """max(n, best_of, 1): each generated choice is output the provider bills."""
    return max(1, _int(body.get("n")) or 1, _int(body.get("best_of")) or 1)


def wants_web_search(body: dict, model_id: str) -> bool:
    """`:online` model, a `{"id": "web"}` plugin, or web_search_options present."""
    if model_id.endswith(":online") or body.get("web_search_options") is not None:
        return True
    plugins = body.get("plugins")
    return isinstance(plugins, list) and any(isinstance(p, dict) and p.get("id") == "web" for p in plugins)


def is_embeddings(body: dict) -> bool:
    return "input" in body and "messages" not in body and "prompt" not in body


def _fee_micro(toman) -> int:
    if not toman:
        return 0
    return int((Decimal(toman) * money.MICRO).to_integral_value(rounding=ROUND_CEILING))


def _price(model, prompt: int, completion: int, web_search: bool, cached: int = 0, write: int = 0) -> int:
    """Exact sum in millionths of a micro-toman (integers only), rounded up once to the next
    micro-toman. `cached` and `write` are the part of `prompt` read from / written to the
    provider's prompt cache, each at its own price."""
    per_prompt, per_completion, request, web, per_cached, per_write = model.rates
    total = ((prompt - cached - write) * per_prompt + cached * per_cached + write * per_write
             + completion * per_completion + (request + (web if web_search else 0)) * money.MICRO)
    return max(0, -(-total // money.MICRO))


def hold_micro(body: dict, models: list, *, embeddings: bool | None = None, prompt: int | None = None) -> int:
    """The hold for this request in micro-toman: the most expensive of `models` (target and
    fallbacks). `embeddings` defaults to guessing from the body (`input`, no messages/prompt);
    `prompt`: `prompt_tokens(body)` when the caller has it already (it is linear in the body)."""
    if not models:
        raise ValueError("hold_micro needs at least one model")
    embeddings = is_embeddings(body) if embeddings is None else embeddings
    prompt = prompt_tokens(body) if prompt is None else prompt
    output = 0 if embeddings else output_tokens(body) if limited(body) else \
        DEFAULT_OUTPUT_TOKENS + reasoning_tokens(body)
    n = choices(body)
    best = 0
    for model in models:
        p = min(prompt, _limit(model, "context_length", prompt))
        completion = min(output, _limit(model, "max_output_tokens", output)) * n
        best = max(best, _price(model, p, completion, not embeddings and wants_web_search(body, model.id)))
    return best


def max_tokens_within(body: dict, models: list, available_micro: int, *, embeddings: bool | None = None,
                      prompt: int | None = None) -> int:
    """The largest max_tokens whose hold fits in `available_micro` for this body (the rest of it
    as it is), below the one asked for; 0 when none does (the prompt alone is too dear). What a
    402 and the dashboard tell a client: a smaller max_tokens may still fit. A binary search over
    the hold, on the refusal's path only."""
    if embeddings if embeddings is not None else is_embeddings(body):
        return 0
    asked = output_tokens(body)
    prompt = prompt_tokens(body) if prompt is None else prompt  # once: the search varies the output only
    low, high = 0, asked - 1  # low always fits (or is 0), high is the largest left to try
    while low < high:
        mid = (low + high + 1) // 2
        trial = {k: v for k, v in body.items() if k not in OUTPUT_FIELDS}
        trial["max_tokens"] = mid
        if hold_micro(trial, models, embeddings=False, prompt=prompt) <= available_micro:
            low = mid
        else:
            high = mid - 1
    return low


def _limit(model, field: str, default: int) -> int:
    """The model's catalog limit `field` when it has a positive one, else `default`."""
    value = getattr(model, field, None)
    return value if type(value) is int and value > 0 else default


def cost_micro(model, prompt_tokens: int, completion_tokens: int, web_search: bool,
               cached_tokens: int = 0, cache_write_tokens: int = 0) -> int:
    """What a served request really costs: tokens at the model's prices, plus its request fee
    and (when web search was used) its web-search fee, rounded up to the next micro-toman.
    `cached_tokens` / `cache_write_tokens` are part of `prompt_tokens` (as OpenAI and
    OpenRouter report them) and are charged at the model's cached-prompt / cache-write
    prices; counts beyond the prompt are capped to it."""
    prompt = max(0, int(prompt_tokens))
    cached = min(prompt, max(0, int(cached_tokens)))
    write = min(prompt - cached, max(0, int(cache_write_tokens)))
    return _price(model, prompt, max(0, int(completion_tokens)), web_search, cached, write)


def provider_cost_micro(cost_usd: Decimal, usd_toman: Decimal, markup: Decimal) -> int:
    """A provider's own reported cost (USD) in micro-toman: cost × rate × markup, rounded up."""
    with localcontext() as c:
        c.prec = 60  # exact for any decimal the source and the operator write
        scaled = Decimal(cost_usd) * Decimal(usd_toman) * Decimal(markup) * money.MICRO
        return max(0, int(scaled.to_integral_value(rounding=ROUND_CEILING)))


_MAX_DETAIL_TOKENS = 100_000_000  # beyond any context window: not a count to bill by
_MAX_COST_USD = 10_000  # per request: a larger reported cost is not believed


def cache_tokens(usage: dict | None) -> tuple[int, int]:
    """(cached, cache-write) prompt tokens of a provider's usage object
    (`prompt_tokens_details.cached_tokens` / `cache_write_tokens`); 0 when absent or odd."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    if not isinstance(details, dict):
        return 0, 0
    counts = (details.get("cached_tokens"), details.get("cache_write_tokens"))
    return tuple(v if type(v) is int and 0 <= v <= _MAX_DETAIL_TOKENS else 0 for v in counts)


def reported_cost(usage: dict | None) -> Decimal | None:
    """The cost a provider reports for the request (OpenRouter's `usage.cost`, USD), or None
    when absent or not a plausible amount."""
    cost = usage.get("cost") if isinstance(usage, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, (int, float, str)):
        return None
    try:
        value = Decimal(repr(cost) if isinstance(cost, float) else cost)
    except ArithmeticError:
        return None
    return value if value.is_finite() and 0 <= value <= _MAX_COST_USD else None

