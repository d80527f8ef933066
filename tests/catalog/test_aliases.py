"""Catalog `aliases` (upgate/catalog/aliases.py): validated with the file, one model per name."""
from __future__ import annotations

import pytest

from upgate.catalog import rules
from upgate.catalog.rules import CatalogError

BASE = """
[[models]]
id = "anthropic/claude-sonnet-4.5"
provider = "p"
prompt_toman_per_million = "1"
completion_toman_per_million = "2"
aliases = {a}
"""
OTHER = """
[[models]]
id = "acme/chat-1"
provider = "p"
prompt_toman_per_million = "1"
completion_toman_per_million = "2"
aliases = {b}
"""


def test_aliases_load_and_survive_storage():
    m, = rules.parse(BASE.format(a='["claude-sonnet-4-5", "claude-sonnet-4-5-20250929"]'), {"p"})
    assert m.aliases == ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929")
    assert rules.Model.from_json(m.to_json()) == m


@pytest.mark.parametrize("a, b, message", [
    ('"claude"', '[]', "aliases must be a list"),
    ('["has space"]', '[]', "must be letters"),
    ('["x", "x"]', '[]', "twice"),
    ('["acme/chat-1"]', '[]', "is the id of a model"),
    ('["claude"]', '["claude"]', "already names anthropic/claude-sonnet-4.5"),
])
def test_refused_aliases(a, b, message):
    with pytest.raises(CatalogError) as info:
        rules.parse(BASE.format(a=a) + OTHER.format(b=b), {"p"})
    assert message in str(info.value)


PATTERNS = """
[[models]]
id = "acme/opus"
provider = "p"
prompt_toman_per_million = "1"
completion_toman_per_million = "2"
aliases = ["claude-opus-*", "claude-*"]

[[models]]
id = "acme/opus-fast"
provider = "p"
prompt_toman_per_million = "1"
completion_toman_per_million = "2"
aliases = ["claude-opus-*-fast", "claude-opus-4-1"]

[[models]]
id = "acme/gpt"
provider = "p"
prompt_toman_per_million = "1"
completion_toman_per_million = "2"
aliases = ["gpt-*"]
"""


def _catalog():
    from upgate.catalog.cache import Catalog, _Snapshot

    cat = Catalog(client=None)
    cat._snap = _Snapshot("1", None, rules.parse(PATTERNS, {"p"}))
    return cat


@pytest.mark.parametrize("name, model", [
    ("acme/opus", "acme/opus"),  # an id first
    ("claude-opus-4-1", "acme/opus-fast"),  # then an exact alias, before any pattern
    ("claude-opus-5-5", "acme/opus"),  # then the longest pattern that matches
    ("claude-opus-5-5-fast", "acme/opus-fast"),
    ("claude-sonnet-9", "acme/opus"),
    ("gpt-6.2-sol", "acme/gpt"),
])
def test_patterns_resolve_exact_names_first_then_the_longest(name, model):
    assert _catalog().resolve(name).id == model


@pytest.mark.parametrize("name", ["claude-opus/x", "gpt", "nobody/nothing", "x" * 300, "claude-opus-5\n"])
def test_a_pattern_never_matches_a_slash_or_beyond_the_name(name):
    from upgate.errors import GatewayError

    with pytest.raises(GatewayError) as info:
        _catalog().resolve(name)
    assert info.value.code == "model_not_found"


def test_a_pattern_is_an_alias_like_any_other():
    m = rules.parse(BASE.format(a='["claude-*"]'), {"p"})[0]
    assert m.aliases == ("claude-*",)
    with pytest.raises(CatalogError):
        rules.parse(BASE.format(a='["claude-*"]') + OTHER.format(b='["claude-*"]'), {"p"})
