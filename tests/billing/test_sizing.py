"""upgate/billing/sizing.py: hold sizing and cost, pure functions, priced with the catalog's Model."""
from __future__ import annotations

import math
from decimal import Decimal

import pytest

from upgate.billing import sizing
from upgate.catalog.rules import Model


def M(id: str = "acme/chat-1", prompt_toman_per_million="15000", completion_toman_per_million="60000",
      request_toman="0", web_search_toman="0", context_length: int | None = None,
      max_output_tokens: int | None = None) -> Model:
    """The catalog's own Model with test prices (decimal strings, as a catalog file has them)."""
    return Model(id=id, provider="acme", upstream_model=id, name=id,
                 prompt_toman_per_million=Decimal(prompt_toman_per_million),
                 completion_toman_per_million=Decimal(completion_toman_per_million),
                 request_toman=Decimal(request_toman), web_search_toman=Decimal(web_search_toman),
                 capabilities=frozenset({"chat"}), context_length=context_length,
                 max_output_tokens=max_output_tokens)


def chat(text="hello", **extra):
    return {"model": "acme/chat-1", "messages": [{"role": "user", "content": text}], **extra}


def prompt_of(body):
    return sizing.prompt_tokens(body)


def test_prompt_estimate_is_chars_over_three_plus_message_overhead():
    assert prompt_of(chat("a" * 30)) == 4 + 10
    assert prompt_of(chat("a" * 31)) == 4 + 11  # rounded up
    two = {"messages": [{"role": "system", "content": "x" * 9}, {"role": "user", "content": "y" * 3}]}
    assert prompt_of(two) == 4 + 3 + 4 + 1


def test_image_and_file_parts_count_a_fixed_amount_not_their_bytes():
    small = "data:image/png;base64," + "A" * 10
    huge = "data:image/png;base64," + "A" * 5_000_000
    parts = lambda url: chat([{"type": "text", "text": "abc"},  # noqa: E731
                              {"type": "image_url", "image_url": {"url": url}}])
    assert prompt_of(parts(small)) == prompt_of(parts(huge)) == 4 + 1 + sizing.IMAGE_PART_TOKENS
    pdf = chat([{"type": "file", "file": {"filename": "a.pdf", "file_data": "Q" * 1_000_000}}])
    assert prompt_of(pdf) == 4 + sizing.FILE_PART_TOKENS
    audio = chat([{"type": "input_audio", "input_audio": {"data": "Z" * 100_000, "format": "wav"}}])
    assert prompt_of(audio) == 4 + sizing.AUDIO_PART_TOKENS


def test_tools_and_tool_calls_count_as_prompt_text():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with_tools = chat("hi", tools=tools)
    assert prompt_of(with_tools) > prompt_of(chat("hi"))
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "x" * 30}}]}
    assert prompt_of({"messages": [call]}) == 4 + math.ceil(31 / 3)


def test_legacy_prompt_and_embeddings_input_forms():
    assert prompt_of({"prompt": "abcdef"}) == 2
    assert prompt_of({"prompt": ["abc", "abc"]}) == 2
    assert prompt_of({"prompt": [1, 2, 3, 4]}) == 4  # token ids
    assert prompt_of({"input": [[1, 2], [3]]}) == 3


def test_default_hold_is_4096_output_tokens_at_completion_price():
    body = chat("a" * 30)
    expected = math.ceil((14 * Decimal("15000") + 4096 * Decimal("60000")))
    assert sizing.hold_micro(body, [M()]) == expected
    assert sizing.output_tokens(body) == 4096


def test_a_smaller_max_tokens_gives_a_smaller_hold_and_the_largest_field_wins():
    base = sizing.hold_micro(chat(), [M()])
    small = sizing.hold_micro(chat(max_tokens=100), [M()])
    assert small < base
    assert small == math.ceil(6 * 15000 + 100 * 60000)
    body = chat(max_tokens=100, max_completion_tokens=300, max_output_tokens=200)
    assert sizing.output_tokens(body) == 300


def test_n_and_best_of_multiply_the_output():
    one = chat(max_tokens=100)
    assert sizing.hold_micro(chat(max_tokens=100, n=3), [M()]) == 6 * 15000 + 3 * 100 * 60000
    assert sizing.hold_micro(chat(max_tokens=100, n=2, best_of=4), [M()]) == 6 * 15000 + 4 * 100 * 60000
    assert sizing.hold_micro(one, [M()]) == 6 * 15000 + 100 * 60000


def test_reasoning_is_inside_the_output_limit_and_on_top_of_the_default():
    # every API's limit counts reasoning (docs/billing-holds.md): max_tokens 100 holds 100
    body = chat(max_tokens=100, reasoning={"max_tokens": 50})
    assert sizing.hold_micro(body, [M()]) == 6 * 15000 + 100 * 60000
    # no limit set: the spec's default answer after the budget
    assert sizing.hold_micro(chat(reasoning={"max_tokens": 50}), [M()]) == 6 * 15000 + (4096 + 50) * 60000
    assert sizing.hold_micro(chat(max_tokens=100, reasoning={"effort": "high"}), [M()]) == \
        sizing.hold_micro(chat(max_tokens=100), [M()])
    assert sizing.hold_micro(chat(max_tokens=100, reasoning={"max_tokens": "50"}), [M()]) == \
        sizing.hold_micro(chat(max_tokens=100), [M()])


@pytest.mark.parametrize("body,model_id,web", [
    (chat(max_tokens=1), "acme/chat-1:online", True),
    (chat(max_tokens=1, plugins=[{"id": "web"}]), "acme/chat-1", True),
    (chat(max_tokens=1, web_search_options={}), "acme/chat-1", True),
    (chat(max_tokens=1, plugins=[{"id": "file-parser"}]), "acme/chat-1", False),
    (chat(max_tokens=1), "acme/chat-1", False),
])
def test_web_search_fee_and_request_fee(body, model_id, web):
    m = M(id=model_id, request_toman=Decimal("2.5"), web_search_toman=Decimal("40"))
    fees = 2_500_000 + (40_000_000 if web else 0)
    assert sizing.hold_micro(body, [m]) == 6 * 15000 + 60000 + fees
    assert sizing.wants_web_search(body, model_id) is web


def test_fallback_list_holds_the_most_expensive_model():
    cheap = M(id="a/cheap", completion_toman_per_million=Decimal("1000"))
    dear = M(id="a/dear", completion_toman_per_million=Decimal("90000"))
    online = M(id="a/mid:online", completion_toman_per_million=Decimal("60000"), web_search_toman=Decimal("50"))
    body = chat(max_tokens=1000)
    holds = {m.id: sizing.hold_micro(body, [m]) for m in (cheap, dear, online)}
    assert sizing.hold_micro(body, [cheap, dear, online]) == max(holds.values()) == holds["a/mid:online"]
    assert sizing.hold_micro(body, [cheap, dear]) == holds["a/dear"]
    with pytest.raises(ValueError):
        sizing.hold_micro(body, [])


def test_embeddings_hold_their_input_only():
    body = {"model": "acme/embed-1", "input": "x" * 300, "max_tokens": 999}
    assert sizing.is_embeddings(body)
    assert sizing.hold_micro(body, [M(web_search_toman=Decimal("9"))]) == 100 * 15000
    assert sizing.hold_micro(chat(max_tokens=5), [M()], embeddings=True) == 6 * 15000


def test_prompt_estimate_is_bounded_by_the_context_length():
    body = chat("z" * 3_000_000, max_tokens=10)
    assert sizing.hold_micro(body, [M(context_length=8192)]) == 8192 * 15000 + 10 * 60000


def test_the_default_output_is_capped_at_the_models_max_output_tokens():
    capped = M(max_output_tokens=2000)
    assert sizing.hold_micro(chat(), [capped]) == 6 * 15000 + 2000 * 60000
    assert sizing.hold_micro(chat(max_tokens=50_000), [capped]) == 6 * 15000 + 2000 * 60000
    # below the cap the request's own max_tokens sizes the hold; no cap keeps the spec's 4096
    assert sizing.hold_micro(chat(max_tokens=100), [capped]) == 6 * 15000 + 100 * 60000
    assert sizing.hold_micro(chat(), [M()]) == 6 * 15000 + 4096 * 60000
    assert sizing.hold_micro(chat(), [M(max_output_tokens=8000)]) == 6 * 15000 + 4096 * 60000


def test_the_cap_covers_the_reasoning_budget_and_applies_per_choice():
    capped = M(max_output_tokens=2000)
    body = chat(reasoning={"max_tokens": 1500}, n=3)
    assert sizing.hold_micro(body, [capped]) == 6 * 15000 + 3 * 2000 * 60000
    assert sizing.hold_micro(body, [M()]) == 6 * 15000 + 3 * (4096 + 1500) * 60000


def test_a_fallback_list_caps_each_entry_by_its_own_model():
    short = M(id="a/short", completion_toman_per_million="90000", max_output_tokens=1000)
    long_ = M(id="a/long", completion_toman_per_million="60000")
    # short: 1000 × 90000 = 90 M; long: 4096 × 60000 ≈ 245.8 M → long is the dearer hold
    assert sizing.hold_micro(chat(), [short, long_]) == 6 * 15000 + 4096 * 60000
    assert sizing.hold_micro(chat(), [short]) == 6 * 15000 + 1000 * 90000
    # the cap is the model's, not the list's: with the long one capped too, short is dearer
    long_capped = M(id="a/long", completion_toman_per_million="60000", max_output_tokens=500)
    assert sizing.hold_micro(chat(), [short, long_capped]) == 6 * 15000 + 1000 * 90000


def test_embeddings_ignore_the_output_cap():
    body = {"model": "acme/embed-1", "input": "x" * 300}
    assert sizing.hold_micro(body, [M(max_output_tokens=10)]) == 100 * 15000


def test_fractional_prices_round_up_once():
    m = M(prompt_toman_per_million="0.000001", completion_toman_per_million="0")
    assert sizing.hold_micro(chat("abc", max_tokens=1), [m]) == 1  # 5 tokens × 1e-6 micro → up to 1 micro


def test_cost_micro_charges_real_tokens_and_fees():
    m = M(request_toman=Decimal("1"), web_search_toman=Decimal("30"))
    assert sizing.cost_micro(m, 1000, 500, False) == 1000 * 15000 + 500 * 60000 + 1_000_000
    assert sizing.cost_micro(m, 1000, 500, True) == 1000 * 15000 + 500 * 60000 + 31_000_000
    odd = M(prompt_toman_per_million="0.333333", completion_toman_per_million="0")
    assert sizing.cost_micro(odd, 3, 0, False) == 1  # 0.999999 micro → 1
    assert sizing.cost_micro(odd, 4, 0, False) == 2  # 1.333332 micro → 2


def test_a_price_the_catalog_could_not_hold_is_refused():
    with pytest.raises(ValueError):
        M(prompt_toman_per_million="0.0000001")
    assert sizing.cost_micro(M(), 0, 0, False) == 0
    assert sizing.cost_micro(M(), -5, 2, False) == 2 * 60000
