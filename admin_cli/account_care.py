"""`upgate-admin account set-phone` and `account note`: the support desk's changes to an account
that are not money. Registered on the `account` group (admin_cli/account.py)."""
from __future__ import annotations

import click

from admin_cli.account import _client, _free_quota_default, account, refusals
from admin_cli.output import emit, json_option


@account.command("set-phone")
@click.argument("account_id")
@click.argument("phone")
@json_option
def set_phone(account_id: str, phone: str, as_json: bool) -> None:
    """Give the account another phone (any spelling: 0912…, +98…, Persian digits). The phone
    must not belong to another account (a phone signs in to one account). Run it again to
    finish a change that was interrupted. Written to the admin log with the old phone.

    \b
    Example:
      upgate-admin account set-phone 2f0c6a1e-… 09121234567
    """
    from upgate.services import phone_change

    default_quota = _free_quota_default()
    with refusals():
        obj, done = phone_change.change(_client(), account_id, phone, default_quota, actor="cli", old_names=True)
    word = (f"phone changed from {done['before'] or '—'} to {done['after']}" if done["changed"]
            else f"already has phone {done['after']}")
    emit(dict(obj, changed=done["changed"], before_phone=done["before"]),
         message=f"account {obj['id']}: {word}")


@account.command("note")
@click.argument("account_id")
@click.argument("text")
@json_option
def note(account_id: str, text: str, as_json: bool) -> None:
    """Add a note to the account for whoever looks at it next (who and when are kept; the
    account holder never sees it).

    \b
    Example:
      upgate-admin account note 2f0c6a1e-… "called about a double charge; refunded"
    """
    from upgate.services import notes

    with refusals():
        made = notes.add(_client(), account_id, text, actor="cli")
    emit(made, message=f"note {made['id']} added")


@account.command("notes")
@click.argument("account_id")
@json_option
def notes_(account_id: str, as_json: bool) -> None:
    """The account's notes, newest first.

    \b
    Example:
      upgate-admin account notes 2f0c6a1e-… --json
    """
    from admin_cli.output import table
    from upgate.services import notes

    with refusals():
        rows = notes.list_notes(_client(), account_id)
    t = table(f"{len(rows)} notes", ["time", "by", "note", "id"], [[n["ts"], n["actor"], n["text"], n["id"]] for n in rows])
    emit({"notes": rows}, table=t)
