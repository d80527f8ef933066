"""The price list an account holder reads (the public /pricing page and /dashboard/models): every
listed model of the catalog a node has in force, its toman per million tokens for input, cached
input and output, its per-request price, its `:free` variant, its capabilities, and when prices
were last updated. Hidden models are never in it. Prices are the catalog's own (exact), not
recomputed: what a request is billed is what this list says."""
from __future__ import annotations

FREE = ":free"


def _row(m, free_variant: str | None) -> dict:
    return {
        "id": m.id, "name": m.name, "free": m.free, "free_variant": free_variant,
        "input_toman_per_million": m.price("prompt_toman_per_million"),
        "cached_input_toman_per_million": m.price("cached_prompt_toman_per_million"),
        "output_toman_per_million": m.price("completion_toman_per_million"),
        "request_toman": m.request_toman, "web_search_toman": m.web_search_toman,
        "capabilities": sorted(m.capabilities), "context_length": m.context_length,
    }


def price_list(catalog) -> dict:
    """{"models": [row…] by id, "prices_updated_at": unix seconds or None}. A `X:free` model
    whose `X` is listed rides on X's row as its `free_variant`; one without it has its own row."""
    visible = sorted(catalog.visible(), key=lambda m: m.id)
    ids = {m.id for m in visible}
    rows = [_row(m, m.id + FREE if m.id + FREE in ids else None) for m in visible
            if not (m.free and m.id[:-len(FREE)] in ids)]
    return {"models": rows, "prices_updated_at": catalog.prices_updated_at}
