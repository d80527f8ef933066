"""The one CSV writer of every CSV upgate writes (statements, transactions, request records, on
the CLI, the management API and the console): a header row, then one row each, CRLF-ended.

Spreadsheet safety (OPERATORS.md): a cell a spreadsheet would run as a formula — text starting
with `=`, `+`, `-`, `@`, a tab or a carriage return — gets a leading `'`, so a ref or a note
typed by anyone (a payment gateway's reference, a customer's key name) is shown, never run.
The numeric amount columns (`*_toman`) stay plain decimals ("-250.500000" is a debit, not a
formula), as long as they hold one; numbers (counts, milliseconds) are never text.
"""
from __future__ import annotations

import csv
import io
import re

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_DECIMAL = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")


def cell(field: str, value):
    """One cell as written: text a spreadsheet would run gets a leading `'`."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START):
        return value
    if field.endswith("_toman") and _DECIMAL.match(value):
        return value
    return "'" + value


def write(fields, rows, headers=None) -> str:
    """`rows` (dicts; keys beyond `fields` are left out, missing ones are empty) as CSV text.
    `headers`: the header row's words (a reader's language), else the field names."""
    fields = list(fields)
    buf = io.StringIO()
    # RFC 4180's CRLF: with it the writer also quotes a cell holding a lone CR (3.11 does not
    # otherwise), so no cell can break a row in two
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\r\n")
    if headers is None:
        w.writeheader()
    else:
        w.writer.writerow([cell("", h) for h in headers])
    for row in rows:
        w.writerow({k: cell(k, v) for k, v in row.items() if k in fields})
    return buf.getvalue()
