"""The one canonical phone number: E.164 (``+989121234567``). Every face (CLI, management API,
console, dashboard) sends what a person typed through `canonical`, and only its result is
stored or looked up. Pure; the index phone → account is in services/accounts.py.

Accepted spellings (CUSTOMERS.md "Phones"): ``09121234567``, ``9121234567``,
``989121234567``, ``+98 912 123 4567``, ``0912-123-4567``, ``00989121234567``, the same in
Persian (۰–۹) or Arabic-Indic (٠–٩) digits, with spaces, dashes, dots or parentheses between
digits. A number written with ``+`` or ``00`` is international and kept as such (E.164: a
country code that does not start with 0, 8 to 15 digits in all); one without is Iranian.
"""
from __future__ import annotations

import re

from upgate.i18n.numbers import to_ascii_digits as ascii_digits  # noqa: F401  (the one digit table)

from upgate.errors import Reasoned

_SEPARATORS = re.compile(r"[\s\-.()\u200c\u200e\u200f\u202a-\u202e]")
_DIGITS = re.compile(r"[0-9]+")
E164 = re.compile(r"^\+[1-9][0-9]{7,14}$")


class PhoneError(Reasoned):
    """Not a phone number in any spelling `canonical` accepts."""

    reason = "phone_invalid"


def canonical(text) -> str:
    """The E.164 form of a phone number as typed, or `PhoneError`."""
    raw = text if isinstance(text, str) else ""
    s = _SEPARATORS.sub("", ascii_digits(raw))
    if s.startswith("+"):
        digits = s[1:]
    elif s.startswith("00"):
        digits = s[2:]
    else:
        digits = None
    if digits is not None:  # international
        if not _DIGITS.fullmatch(digits):
            raise PhoneError(f"not a phone number: {text!r}")
        if digits.startswith("98") and len(digits) != 12:
            raise PhoneError(f"an Iranian number has 10 digits after +98: {text!r}")
        out = "+" + digits
    elif not _DIGITS.fullmatch(s):
        raise PhoneError(f"not a phone number: {text!r}")
    elif len(s) == 11 and s.startswith("0"):
        out = "+98" + s[1:]
    elif len(s) == 10 and s[0] != "0":
        out = "+98" + s
    elif len(s) == 12 and s.startswith("98"):
        out = "+" + s
    else:
        raise PhoneError(f"not an Iranian phone number (like 09121234567) nor an international one "
                         f"starting with + (like +989121234567): {text!r}")
    if not E164.match(out):
        raise PhoneError(f"not a phone number: {text!r}")
    return out


def is_canonical(text: str) -> bool:
    try:
        return canonical(text) == text
    except PhoneError:
        return False
