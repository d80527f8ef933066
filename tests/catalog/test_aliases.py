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
