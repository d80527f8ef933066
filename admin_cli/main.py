"""Root of `upgate-admin`. One module per noun registers its group here.

Every failure ends the same way, through `Root`: one line `error: …` on stderr, exit code 1,
no traceback — refused input, a usage error, a malformed UPGATE_REDIS_URL, a store that does
not answer. (Click alone would print a usage block and exit 2, and a store error would escape
as a traceback.)
"""
from __future__ import annotations

import os
import re
import sys

import click
import redis
from redis.exceptions import RedisClusterException

from admin_cli.output import EXIT_REFUSED, Refused
from upgate.store import connection as store

DEFAULT_URL = "redis://127.0.0.1:6379/0"


# Commands that only read: every other one writes, and refuses a store that may evict keys
READ_ONLY = frozenset(("show", "list", "usage", "statement", "transactions", "audit", "requests", "find",
                       "overview"))


def redis_client():
    """The store named by UPGATE_REDIS_URL (the same one the gateway uses). A writing command
    refuses a store that may evict keys (upgate/store/policy.py)."""
    from upgate.store import policy as store_policy

    url = os.environ.get("UPGATE_REDIS_URL") or DEFAULT_URL
    try:
        client = store.connect_sync(url)
    except ValueError as e:  # redis-py's URL parser: bad scheme, port, query option
        raise Refused(f"UPGATE_REDIS_URL is malformed: {e}") from None
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.info_name not in READ_ONLY:
        try:
            store_policy.check(client, url)
        except store_policy.EvictingStore as e:
            raise Refused(str(e)) from None
    return client


def store_hint() -> str:
    """Where an unknown id was looked for: `upgate demo` keeps a private embedded store, and a
    newcomer pointing upgate-admin at the default Redis would otherwise see a bare "unknown"."""
    url = os.environ.get("UPGATE_REDIS_URL")
    where = f"the store {_redact(url)}" if url else \
        f"the default store {DEFAULT_URL} (UPGATE_REDIS_URL is not set)"
    return f"looked in {where}; a running `upgate demo` keeps a private store upgate-admin cannot see"


def _redact(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//", url)  # never show a password


def store_error(e: Exception) -> str:
    """One line for a store failure (redis-py's messages name host and port, never a password)."""
    detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
    name = type(e).__name__ + (f": {detail}" if detail else "")
    if isinstance(e, (redis.ConnectionError, redis.TimeoutError, RedisClusterException)):
        return f"cannot reach the store ({name})"
    return f"the store refused the command ({name})"


class Root(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (redis.RedisError, RedisClusterException) as e:
            raise Refused(store_error(e)) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.Abort:
            click.echo("error: aborted", err=True)
            rv = EXIT_REFUSED
        except click.ClickException as e:
            message = e.format_message()
            if isinstance(e, click.UsageError) and e.ctx is not None:
                message += f" (see '{e.ctx.command_path} --help')"
            click.echo(f"error: {message}", err=True)
            rv = e.exit_code if isinstance(e, Refused) else EXIT_REFUSED  # models sync: 3, over --max-change
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_context
def cli(ctx: click.Context, as_json: bool) -> None:
    """Operate an upgate deployment: accounts, keys, the model catalog and usage.

    Reads UPGATE_REDIS_URL (default redis://127.0.0.1:6379/0). Every command takes --json.
    Every error is one line on stderr and exit code 1.

    \b
    Example:
      upgate-admin account create --phone 09120000000 --balance 50000
    """
    ctx.ensure_object(dict)
    ctx.obj["json"] = as_json


def _register() -> None:
    import importlib

    for name, attrs in (("account", ("account",)), ("account_care", ()), ("key", ("key",)), ("models", ("models",)),
                        ("usage", ("usage",)), ("overview", ("overview",)), ("audit", ("audit",)), ("requests", ("requests", "request")),
                        ("admin_token", ("admin_token",)), ("webhook", ("webhook",)),
                        ("payments", ("payments",)), ("migrate", ("migrate",))):
        try:
            mod = importlib.import_module(f"admin_cli.{name}")
        except ModuleNotFoundError as e:  # a noun not built yet
            if e.name != f"admin_cli.{name}":
                raise
            continue
        for attr in attrs:
            cli.add_command(getattr(mod, attr))


_register()


# ---- the admin log: every command that changes something is recorded, actor "cli" -------------

READS = {"list", "show", "log", "transactions", "statement", "requests", "usage", "audit", "test", "failed", "find",
         "overview", "notes", "search"}


def _plain(value):
    """A parameter as the log keeps it: a URL loses its query and credentials (a source may
    carry a token in either), as the API's and the console's entries do."""
    from upgate.services.prices import shown_source

    return shown_source(value)


# The admin log's detail uses the management API's field names whoever wrote it: a CLI
# parameter is recorded under the API's name for it (a clearing flag as that field set to null).
API_NAMES = {"amount": "amount_toman", "balance": "balance_toman", "rpm": "rate_limit_rpm",
             "monthly_limit": "monthly_limit_toman", "expires": "expires_at", "n": "free_quota_per_day",
             "every": "all"}
CLEARS = {"no_monthly_limit": "monthly_limit_toman", "all_models": "allowed_models", "no_expiry": "expires_at"}
COMMAND_NAMES = {"account set-low-balance": {"amount": "low_balance_toman"}}


def _api_detail(path: str, params: dict) -> dict:
    names = {**API_NAMES, **COMMAND_NAMES.get(path, {})}
    out = {}
    for name, value in params.items():
        if name in CLEARS or (names.get(name) == "low_balance_toman" and str(value).strip().lower() == "off"):
            out[CLEARS.get(name, "low_balance_toman")] = None
        else:
            out[names.get(name, name)] = _plain(value)
    return out


def _recorded(path: str, command: click.Command) -> None:
    """Wrap a write command's callback so a success is recorded in the admin log: the first
    argument as target, the other arguments and the options given as detail (ids, amounts,
    refs, notes, settings: nothing a command takes is a secret)."""
    inner = command.callback
    names = [p.name for p in command.params if p.name != "as_json"]
    first = next((p.name for p in command.params if isinstance(p, click.Argument)), None)

    def callback(**params):
        rv = inner(**params)
        if params.get("dry_run"):
            return rv
        from upgate.services import admin_log

        detail = _api_detail(path, {n: params[n] for n in names
                                    if n != first and params.get(n) not in (None, False, ())})
        target = _plain(params[first]) if first else None
        try:
            admin_log.face_record(redis_client(), "cli", path, target, detail)
        except (redis.RedisError, RedisClusterException) as e:
            from admin_cli.output import warn

            warn(f"done, but not recorded in the admin log: {store_error(e)}")
        return rv

    command.callback = callback


def _record_writes(group: click.Group, prefix: str = "") -> None:
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            _record_writes(command, path + " ")
        elif name not in READS and command.callback is not None:
            _recorded(path, command)


_record_writes(cli)


def main() -> None:
    cli()


__all__ = ["cli", "main", "redis_client", "Refused"]
