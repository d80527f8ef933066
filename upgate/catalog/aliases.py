"""Catalog `aliases`: other names a model answers to, so an agent's default model names
(`claude-sonnet-4-5`, `claude-3-5-haiku-20241022`, …) resolve to a catalog id on every route
(DESIGN.md, "Agent clients"). Pure rules, no I/O.

An alias is matched exactly (case included, as the agent sends it), names one visible model,
and may not be another model's id or another model's alias: a name never means two models.
An alias with `*` is a pattern (`claude-opus-*`): `*` matches any run of characters other than
`/`, so every release's default names resolve without an operator's edit. Exact names (ids,
then aliases) come first, then the longest matching pattern (ties: the catalog's order).
The key's allowed_models, the hold, the charge and the request record use the catalog id.
"""
from __future__ import annotations

import re

ALIAS = re.compile(r"^[A-Za-z0-9*][A-Za-z0-9._:@/*-]{0,199}$")
MAX_ALIASES = 32
MAX_NAME = 256  # a name longer than this is matched against no pattern
_STAR = r"[^/\x00-\x20\x7f]*"  # `*`: a run of anything but `/` (a space or control character is no name's)


def is_pattern(alias: str) -> bool:
    return "*" in alias


class Patterns:
    """A catalog's alias patterns, longest first: `match(name)` → the model, or None."""

    _CACHE = 1024  # names remembered (a client sends few; a stranger's junk is bounded)

    def __init__(self, pairs) -> None:
        ordered = sorted(pairs, key=lambda p: -len(p[0]))  # stable: ties keep the catalog's order
        self._compiled = [(re.compile("".join(_STAR if c == "*" else re.escape(c) for c in a) + r"\Z"), m)
                          for a, m in ordered]
        self._seen: dict = {}

    def __bool__(self) -> bool:
        return bool(self._compiled)

    def match(self, name):
        if not isinstance(name, str) or len(name) > MAX_NAME:
            return None
        try:
            return self._seen[name]
        except KeyError:
            pass
        found = next((m for rx, m in self._compiled if rx.match(name)), None)
        if len(self._seen) >= self._CACHE:
            self._seen.clear()
        self._seen[name] = found
        return found


class AliasError(ValueError):
    """An alias list is refused; the message names the alias."""


def parse(value: object) -> tuple[str, ...]:
    """An entry's `aliases` field (absent: none)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_ALIASES or not all(isinstance(a, str) for a in value):
        raise AliasError(f"aliases must be a list of at most {MAX_ALIASES} strings")
    for a in value:
        if not ALIAS.match(a):
            raise AliasError(f"alias {a!r} must be letters, digits and . _ : @ / - * (at most 200)")
    if len(set(value)) != len(value):
        raise AliasError("aliases lists a name twice")
    return tuple(value)


def check_unique(models) -> None:
    """Every alias names one model and is no model's id."""
    ids = {m.id for m in models}
    seen: dict[str, str] = {}
    for m in models:
        for a in m.aliases:
            if a in ids:
                raise AliasError(f"{m.id}: alias {a!r} is the id of a model")
            if a in seen:
                raise AliasError(f"{m.id}: alias {a!r} already names {seen[a]}")
            seen[a] = m.id
