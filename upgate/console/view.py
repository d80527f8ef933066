"""Small pieces of markup the console's templates share: an amount as a person reads it with
every digit in its tooltip, and a long id shortened on screen but whole in the page (so hover
shows it and copying takes all of it). Numbers come from upgate/i18n (the dashboard's helpers)."""
from __future__ import annotations

from tornado.escape import xhtml_escape

from upgate.i18n import Formatter


def money(fmt: Formatter, value) -> str:
    """A toman amount (six-decimal string or Decimal): rounded for the eye, exact on hover."""
    shown, exact = fmt.toman(value), fmt.exact(value)
    return (f'<span class="amt" dir="ltr" title="{xhtml_escape(exact)}">{xhtml_escape(shown)}</span>'
            if shown != exact else f'<span class="amt" dir="ltr">{xhtml_escape(shown)}</span>')


def money_micro(fmt: Formatter, value: int | None) -> str:
    """`money` of integer micro-toman."""
    shown, exact = fmt.micro(value), fmt.exact_micro(value)
    return (f'<span class="amt" dir="ltr" title="{xhtml_escape(exact)}">{xhtml_escape(shown)}</span>'
            if shown != exact else f'<span class="amt" dir="ltr">{xhtml_escape(shown)}</span>')


def short_id(value, cls: str = "") -> str:
    """An id cut to its first characters by CSS (.trunc: ellipsis), the whole of it in the text
    and the tooltip."""
    text = xhtml_escape(str(value or "—"))
    return f'<span class="id trunc {cls}" dir="ltr" title="{text}">{text}</span>'


def audit_sentence(fmt: Formatter, translate, entry: dict) -> str:
    """An admin log entry's verb and object in the reader's language, the object a link where it
    has a page (an account): "topped up account <a>2f0c…</a>". Safe HTML."""
    from upgate.services import admin_log

    obj = entry.get("object") or {}
    oid = obj.get("id")
    if oid and obj.get("type") == "account":
        words = f'<a href="/admin/accounts/{xhtml_escape(oid)}">{short_id(oid)}</a>'
    elif oid:
        words = short_id(oid)
    else:
        words = ""
    text = xhtml_escape(admin_log.sentence({**entry, "object": {"id": "\x00"}}, translate))
    return text.replace("\x00", words)


def audit_value(fmt: Formatter, translate, field: str, value) -> str:
    """One before/after value as a person reads it: an amount in toman, a state in words."""
    from upgate.services import admin_log

    if value is None:
        return "—"
    if field.endswith("_toman"):
        return money(fmt, value)
    if isinstance(value, str) and value in admin_log.VALUE_WORDS:
        return xhtml_escape(translate(admin_log.VALUE_WORDS[value]))
    if isinstance(value, int):
        return xhtml_escape(fmt.count(value))
    return f'<bdi dir="ltr">{xhtml_escape(str(value))}</bdi>'


def audit_change(fmt: Formatter, translate, entry: dict) -> str:
    """ "balance: 1,000 → 1,050" for each value the entry changed. Safe HTML."""
    from upgate.services import admin_log

    parts = []
    for field, before, after in admin_log.changes(entry):
        name = xhtml_escape(translate(admin_log.FIELD_WORDS.get(field, field)))
        parts.append(f'<span class="chg">{name}: {audit_value(fmt, translate, field, before)} '
                     f'<span aria-hidden="true">{"←" if fmt.rtl else "→"}</span> {audit_value(fmt, translate, field, after)}</span>')
    return "<br>".join(parts) or "—"
