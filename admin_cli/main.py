"""Root of `upgate-admin`. One module per noun registers its group here."""
from __future__ import annotations

import os

import click
import redis

from admin_cli.output import EXIT_STORE, Refused
from upgate import store


def redis_client():
    """The store named by UPGATE_REDIS_URL (the same one the gateway uses)."""
    url = os.environ.get("UPGATE_REDIS_URL") or "redis://127.0.0.1:6379/0"
    return store.connect_sync(url)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_context
def cli(ctx: click.Context, as_json: bool) -> None:
    """Operate an upgate deployment: accounts, keys, the model catalog and usage.

    Reads UPGATE_REDIS_URL (default redis://127.0.0.1:6379/0). Every command takes --json.

    \b
    Example:
      upgate-admin account create --phone 09120000000 --balance 50000
    """
    ctx.ensure_object(dict)
    ctx.obj["json"] = as_json


def _register() -> None:
    import importlib

    for name in ("account", "key", "models", "usage"):
        try:
            mod = importlib.import_module(f"admin_cli.{name}")
        except ModuleNotFoundError as e:  # a noun not built yet
            if e.name != f"admin_cli.{name}":
                raise
            continue
        cli.add_command(getattr(mod, name))


_register()


def main() -> None:
    try:
        cli(standalone_mode=True)
    except redis.RedisError as e:
        click.echo(f"error: cannot reach the store ({type(e).__name__})", err=True)
        raise SystemExit(EXIT_STORE) from None


__all__ = ["cli", "main", "redis_client", "Refused"]
