"""`upgate-admin admin-token`: tokens for the management API and the console (create — shown
once —, list, revoke) and the admin log of every operator write."""
from __future__ import annotations

from contextlib import contextmanager

import click

from admin_cli.output import Refused, emit, json_mode, json_option, table, warn
from upgate.billing import jalali
from upgate.services import admin_log, admin_tokens


def _client():
    from admin_cli.main import redis_client

    return redis_client()


@contextmanager
def _refusals():
    try:
        yield
    except (admin_tokens.AdminTokenError, admin_log.InvalidLimit) as e:
        raise Refused(str(e)) from None
    except ValueError as e:  # a filter refused (an account id, a day)
        raise Refused(str(e)) from None


def _iso(ts) -> str | None:
    return jalali.utc_iso(ts) if ts else None


@click.group("admin-token")
def admin_token() -> None:
    """Admin tokens for the management API (/admin/v1) and the console, and the admin log.

    \b
    Example:
      upgate-admin admin-token create payments --json
    """


@admin_token.command("create")
@click.argument("name")
@click.option("--read-only", is_flag=True, help="May read everything and change nothing.")
@json_option
def create(name: str, read_only: bool, as_json: bool) -> None:
    """Create an admin token named NAME. The token (upa_…) is printed this once: only its
    HMAC is stored. Needs UPGATE_KEY_PEPPER (the gateway's value).

    \b
    Example:
      upgate-admin admin-token create support --read-only --json
      {"name": "support", "token": "upa_…", "read_only": true}
    """
    from admin_cli.key import _pepper

    pepper = _pepper()
    with _refusals():
        result = admin_tokens.create(_client(), pepper, name, read_only=read_only)
    emit(result, message=f"admin token {result['name']}{' (read-only)' if read_only else ''}: "
                         f"{result['token']}")
    if not json_mode():
        warn("the token is shown only this once; store it now (only its HMAC is kept)")


@admin_token.command("list")
@json_option
def list_(as_json: bool) -> None:
    """List admin tokens: name, read-only, created, last used (never the tokens).

    \b
    Example:
      upgate-admin admin-token list --json
    """
    rows = [dict(t, created_at=_iso(t["created_at"]), last_used_at=_iso(t["last_used_at"]))
            for t in admin_tokens.list_tokens(_client())]
    emit({"tokens": rows},
         table=table(f"{len(rows)} admin tokens", ["name", "read-only", "created", "last used"],
                     [[t["name"], "yes" if t["read_only"] else "no", t["created_at"],
                       t["last_used_at"] or "never"] for t in rows]))


@admin_token.command("revoke")
@click.argument("name")
@json_option
def revoke(name: str, as_json: bool) -> None:
    """Revoke the token NAME: refused from its next request on, on every gateway node.

    \b
    Example:
      upgate-admin admin-token revoke support
    """
    with _refusals():
        admin_tokens.revoke(_client(), name)
    emit({"name": name.strip(), "revoked": True}, message=f"admin token {name.strip()} revoked")


@admin_token.command("log")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, admin_log.MAX_ENTRIES),
              help="How many entries, newest first.")
@click.option("--actor", metavar="NAME", help="Only this admin token's writes (or cli).")
@click.option("--account", metavar="ID", help="Only what was done to this account and its keys.")
@click.option("--action", metavar="VERB", help="Only this verb (account.topup) or noun (key).")
@click.option("--from", "start", metavar="YYYY-MM-DD", help="From this Jalali day (Tehran).")
@click.option("--to", "end", metavar="YYYY-MM-DD", help="To this Jalali day, included.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV: a header row, then one row each.")
@json_option
def log(limit: int, actor, account, action, start, end, as_csv: bool, as_json: bool) -> None:
    """Show the admin log: who (the CLI, "cli", or an admin token's name) did what to which
    object, with the values before and after, newest first; replays are marked. Never a secret.

    \b
    Example:
      upgate-admin admin-token log --limit 20 --json
      upgate-admin admin-token log --account 2f0c6a1e-… --from 1405-09-01 --csv
    """
    with _refusals():
        entries = admin_log.search(_client(), actor=actor, account=account, action=action, start=start,
                                   end=end, limit=limit)
    if as_csv and not as_json:
        click.echo(admin_log.to_csv(entries), nl=False)
        return

    def change(e) -> str:
        return ", ".join(f"{k}: {b if b is not None else '—'} → {a if a is not None else '—'}"
                         for k, b, a in admin_log.changes(e))
    emit({"entries": entries},
         table=table(f"last {len(entries)} admin writes", ["time", "actor", "what", "change", "replay", "note"],
                     [[e["ts"], e["actor"], admin_log.sentence(e), change(e), "replay" if e["replay"] else "",
                       e["note"]] for e in entries]))
