"""`upgate-admin migrate`: bring the store's data to this release's form (upgate/migrations/)."""
from __future__ import annotations

import click

from admin_cli.output import Refused, emit, json_option, table


@click.command()
@click.option("--dry-run", is_flag=True, help="Count what each pending migration would change; write nothing.")
@click.option("--status", "show_status", is_flag=True, help="List the applied and the pending migrations.")
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 10_000),
              help="Accounts per step (each recorded: an interrupted run goes on from there).")
@json_option
def migrate(dry_run: bool, show_status: bool, batch: int, as_json: bool) -> None:
    """Apply the pending data migrations, oldest first. Each is idempotent and safe to run while
    the gateway serves; interrupted, run it again and it goes on where it stopped. `upgate
    serve` warns while one is pending, and refuses data a newer release migrated.

    \b
    Examples:
      upgate-admin migrate --status
      upgate-admin migrate --dry-run
      upgate-admin migrate --json
    """
    from admin_cli.main import redis_client
    from upgate import migrations

    client = redis_client()
    if show_status:
        st = migrations.status(client)
        emit(st, table=table(f"data at migration {st['applied']} of {st['latest']}",
                             ["version", "name", "state", "applied at", "resume after", "what it does"],
                             [[m["version"], m["name"], m["state"], m["applied_at"], m["resume_after"], m["summary"]]
                              for m in st["migrations"]]))
        return
    try:
        out = migrations.run(client, dry_run=dry_run, batch=batch)
    except migrations.MigrationError as e:
        raise Refused(str(e)) from None
    if out["migrations"] and not dry_run:
        from upgate.services import admin_log

        admin_log.record(client, "cli", "migrate", None, {"from": out["from"], "to": out["to"]},
                         before={"version": out["from"]}, after={"version": out["to"]})
    word = "would change" if dry_run else "changed"
    if not out["migrations"]:
        message = f"nothing to migrate: the data is at migration {out['to']}"
    elif dry_run:
        message = f"dry run: {len(out['migrations'])} migration(s) pending; nothing written"
    else:
        message = f"data migrated from {out['from']} to {out['to']}"
    emit(out, table=table(message, ["version", "name", f"{word}", "accounts"],
                          [[m["version"], m["name"], m["changed"], m["accounts"]] for m in out["migrations"]]))
