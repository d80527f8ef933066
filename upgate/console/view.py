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
