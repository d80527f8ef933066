"""One error vocabulary for every face: a service refusal (a ValueError subclass raised before
anything is written) → its code, its one-line message and the field at fault. The management
API renders it as its error object, the console as the status and the line at the form, the
CLI as `error: <message>` and exit 1 — the same refusal reads the same everywhere.

The codes are the catalogue's (upgate/errors.py): `not_found` (an unknown account, key, request
record or failed webhook event), `phone_in_use` (another account has the phone),
`idempotency_conflict` (a ref reused with another amount or kind), `price_change_too_large` (a price sync over its guard), `invalid_request` (any other).

Beside the code, a refusal carries its `reason` and `params` (upgate.errors.Reasoned): what a
page renders in its reader's language through upgate/i18n/refusals.py. The JSON APIs keep the
English `message` and the `code`.
"""
from __future__ import annotations

from dataclasses import dataclass

from upgate.catalog import store as catalog_store
from upgate.services import records, routes, transactions
from upgate.services.account_rules import NotFound, PhoneInUse, UnknownAccount
from upgate.services.key_rules import UnknownKey
from upgate.webhooks.service import UnknownEvent

NOT_FOUND = (NotFound, UnknownAccount, UnknownKey, records.UnknownRequest, UnknownEvent, routes.UnknownModel)


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str
    field: str | None
    reason: str = "invalid"
    params: dict | None = None


def refusal(e: ValueError) -> Refusal:
    """The code, message (the first line of the refusal) and field of a service refusal."""
    text = str(e).strip()
    message = text.splitlines()[0] if text else ""
    field = getattr(e, "field", None)
    if isinstance(e, NOT_FOUND):  # the id at fault is the path's or the command's, no field
        code, field = "not_found", None
    elif isinstance(e, PhoneInUse):
        code, field = "phone_in_use", "phone"
    elif isinstance(e, transactions.IdempotencyConflict):
        code, field = "idempotency_conflict", field or "ref"
    elif isinstance(e, catalog_store.ChangeTooLarge):
        code = "price_change_too_large"
    else:
        code = "invalid_request"
    return Refusal(code, message, field, getattr(e, "reason", "invalid"), getattr(e, "params", None) or {})
