"""Data migrations: `upgate-admin migrate` brings what older releases left in the store to the
form this release reads, without Redis by hand (docs/operator-guide.md "Upgrading").

- The applied version lives in the store (``keyspace.MIGRATIONS``): `version` = the newest step
  done, `<n>:at` when, `<n>:after` the last account id an unfinished step has done.
- Each step (steps.py) is idempotent and goes over the accounts in id order, a batch at a time,
  recording its place after every batch: interrupted (a crash, Ctrl-C, a lost connection), the
  next run goes on from there. One run at a time (a lock with a lease, renewed every batch).
- Safe on a live cluster: each write is one atomic step of one account or one phone, checked
  against what it read; the gateway keeps serving meanwhile.
- `dry_run` counts what each pending step would change and writes nothing.
- `check` is what `upgate serve` asks first: data newer than this release knows is refused
  (`DataTooNew`); pending steps are a warning. A store with no accounts and no version is new:
  it is marked at the latest version.
"""
from __future__ import annotations

import secrets
import time

from upgate.billing import jalali
from upgate.migrations.steps import LATEST, STEPS
from upgate.store import connection as store, keyspace

LEASE_MS = 120_000  # a run that stopped renewing (killed) frees the lock after this
BATCH = 500


class MigrationError(ValueError):
    """A refused migrate: one line for the operator."""

    field = None


class DataTooNew(MigrationError):
    """The store was migrated by a newer release than this one."""


class MigrationRunning(MigrationError):
    """Another `migrate` holds the lock."""


def applied(client) -> int:
    raw = client.hget(keyspace.MIGRATIONS, "version")
    return int(store.text(raw)) if raw is not None else 0


def check(client) -> str | None:
    """`upgate serve`'s question: raises `DataTooNew`, or returns a warning when migrations are
    pending (None when none is). Marks a new, empty store as the latest version."""
    version = applied(client)
    if version == 0 and not client.exists(keyspace.ACCOUNTS):
        client.hsetnx(keyspace.MIGRATIONS, "version", LATEST)
        return None
    if version > LATEST:
        raise DataTooNew(f"the store's data is at migration {version}, newer than this release knows "
                         f"({LATEST}): run the release that migrated it, or a newer one")
    if version < LATEST:
        names = ", ".join(s.name for s in STEPS if s.version > version)
        return (f"the store's data needs {LATEST - version} migration(s) ({names}): "
                f"run `upgate-admin migrate` (safe while serving; --dry-run shows what it changes)")
    return None


def status(client) -> dict:
    """{"applied", "latest", "migrations": [{"version", "name", "summary", "state": "applied" |
    "pending" | "in progress", "applied_at", "resume_after"}]}."""
    state = store.text_map(client.hgetall(keyspace.MIGRATIONS))
    version = int(state.get("version") or 0)
    rows = []
    for s in STEPS:
        after = state.get(f"{s.version}:after")
        rows.append({"version": s.version, "name": s.name, "summary": s.summary,
                     "state": "applied" if s.version <= version else "in progress" if after else "pending",
                     "applied_at": state.get(f"{s.version}:at"), "resume_after": after})
    return {"applied": version, "latest": LATEST, "migrations": rows}


def _ids(client) -> list[str]:
    return sorted(store.text(a) for a in client.sscan_iter(keyspace.ACCOUNTS, count=1000))


class _Lock:
    def __init__(self, client):
        self.client, self.token = client, secrets.token_hex(8)

    def __enter__(self):
        if not self.client.set(keyspace.MIGRATE_LOCK, self.token, nx=True, px=LEASE_MS):
            raise MigrationRunning("another `upgate-admin migrate` is running (or was killed less than "
                                   f"{LEASE_MS // 1000} s ago): wait, then run it again")
        return self

    def renew(self) -> None:
        if store.text(self.client.get(keyspace.MIGRATE_LOCK) or b"") != self.token:
            raise MigrationRunning("this migrate lost its lock (paused past its lease?): run it again")
        self.client.pexpire(keyspace.MIGRATE_LOCK, LEASE_MS)

    def __exit__(self, *exc):
        if store.text(self.client.get(keyspace.MIGRATE_LOCK) or b"") == self.token:
            self.client.delete(keyspace.MIGRATE_LOCK)


def run(client, *, dry_run: bool = False, batch: int = BATCH, on_batch=None) -> dict:
    """Apply every pending step (or, `dry_run`, count what each would change). Returns
    {"from", "to", "dry_run", "migrations": [{"version", "name", "changed", "accounts"}]}.
    `on_batch(version, done_ids)` is called after each batch is recorded (progress)."""
    version = applied(client)
    if version > LATEST:
        raise DataTooNew(f"the store's data is at migration {version}; this release knows {LATEST}")
    out = {"from": version, "to": version, "dry_run": dry_run, "migrations": []}
    pending = [s for s in STEPS if s.version > version]
    if not pending:
        return out
    if dry_run:
        ids = _ids(client)
        for s in pending:
            changed = sum(s.batch(client, ids[i:i + batch], True) for i in range(0, len(ids), batch))
            changed += s.finish(client, ids, True) if s.finish else 0
            out["migrations"].append({"version": s.version, "name": s.name, "changed": changed,
                                      "accounts": len(ids)})
        return out
    with _Lock(client) as lock:
        for s in pending:
            after = store.text(client.hget(keyspace.MIGRATIONS, f"{s.version}:after") or b"") or None
            ids = _ids(client)
            todo = [a for a in ids if after is None or a > after]
            changed = 0
            for i in range(0, len(todo), batch):
                chunk = todo[i:i + batch]
                changed += s.batch(client, chunk, False)
                lock.renew()
                client.hset(keyspace.MIGRATIONS, f"{s.version}:after", chunk[-1])
                if on_batch is not None:
                    on_batch(s.version, chunk)
            if s.finish:
                changed += s.finish(client, ids, False)
            lock.renew()
            client.hset(keyspace.MIGRATIONS, mapping={"version": s.version,
                                                      f"{s.version}:at": jalali.utc_iso(time.time())})
            client.hdel(keyspace.MIGRATIONS, f"{s.version}:after")
            out["to"] = s.version
            out["migrations"].append({"version": s.version, "name": s.name, "changed": changed,
                                      "accounts": len(ids)})
    return out


__all__ = ["LATEST", "STEPS", "DataTooNew", "MigrationError", "MigrationRunning", "applied", "check",
           "run", "status"]
