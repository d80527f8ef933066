"""`upgate-admin key`: create API keys (the only time a full key is shown), change their
settings, revoke them, list an account's keys (prefix and last four only)."""
from __future__ import annotations

import os

import click

from admin_cli.account import refusals
from admin_cli.output import Refused, emit, json_mode, json_option, kv_table, table, warn
from upgate.services import accounts, keys


def _client():
    from admin_cli.main import redis_client

    return redis_client()


def _pepper() -> str:
    """UPGATE_KEY_PEPPER, the HMAC secret the gateway hashes keys with. Without it a key
    could never authenticate, so `key create` refuses; UPGATE_INSECURE_DEV=1 uses the same
    fixed development pepper as `upgate serve --insecure-dev`."""
    pepper = os.environ.get("UPGATE_KEY_PEPPER", "")
    if pepper:
        return pepper
    if os.environ.get("UPGATE_INSECURE_DEV") == "1":
        from upgate.settings import DEV_PEPPER

        warn("UPGATE_KEY_PEPPER is not set: using the fixed development pepper "
             "(UPGATE_INSECURE_DEV=1); keys made this way only work with `upgate serve --insecure-dev`")
        return DEV_PEPPER
    raise Refused("UPGATE_KEY_PEPPER is not set: set it to the gateway's key pepper "
                  "(or UPGATE_INSECURE_DEV=1 for local development only)")


def _warn_unknown_models(client, models: list[str] | None) -> None:
    """Allowed ids are checked for shape, not presence: a model may be added to the catalog
    later. Say so when one is not in the catalog in force."""
    if not models:
        return
    _resolved, missing = keys.catalog_models(client, models)  # the one rule (aliases, patterns)
    if missing:
        warn("not in the catalog in force (allowed anyway): " + ", ".join(missing))


def _setting_options(f):
    """The options `key create` and `key update` share."""
    for option in reversed([
        click.option("--name", metavar="S", help="Free label (update: an empty string clears it)."),
        click.option("--monthly-limit", "monthly_limit", metavar="AMOUNT",
                     help="Cap in toman on settled cost plus open holds per Jalali month."),
        click.option("--allowed-models", "allowed_models", metavar="ID,ID",
                     help="Comma-separated model ids this key may use (default: all)."),
        click.option("--rpm", metavar="N", help="Requests per minute, 1 to 600 (default 60)."),
        click.option("--expires", metavar="ISO8601",
                     help="Expiry, e.g. 2027-03-20 or 2027-03-20T12:00:00+03:30 (no zone = UTC), "
                          "at most 10 years ahead."),
    ]):
        f = option(f)
    return f


def _parse_settings(monthly_limit, allowed_models, rpm, expires) -> dict:
    """Option text → keyword arguments of keys.create_key / keys.update_key (only those given)."""
    out: dict = {}
    if monthly_limit is not None:
        out["monthly_limit_micro"] = keys.parse_monthly_limit(monthly_limit)
    if allowed_models is not None:
        out["allowed_models"] = keys.parse_models(allowed_models)
    if rpm is not None:
        out["rpm"] = keys.parse_rpm(rpm)
    if expires is not None:
        out["expires_at_ms"] = keys.parse_expires(expires)
    return out


@click.group()
def key() -> None:
    """API keys: create (shown once), update, revoke, list, show, find (by prefix).

    \b
    Example:
      upgate-admin key create 2f0c6a1e-… --name ci --rpm 120 --monthly-limit 200000
    """


@key.command("create")
@click.argument("account_id")
@_setting_options
@json_option
def create(account_id: str, name, monthly_limit, allowed_models, rpm, expires, as_json) -> None:
    """Create a key for ACCOUNT_ID. The full key is printed this once and never again: only
    its hash is stored. Needs UPGATE_KEY_PEPPER (the gateway's value).

    \b
    Example:
      upgate-admin key create 2f0c6a1e-… --name ci --allowed-models openai/gpt-4o-mini,acme/chat-1:free --rpm 120 --json
      {"key": "sk-up-…", "key_id": "9f2c4e1a0b3d5c7e", "account_id": …, "prefix": "sk-up-AbCd", …}
    """
    pepper = _pepper()
    with refusals():
        settings = _parse_settings(monthly_limit, allowed_models, rpm, expires)
        client = _client()
        made = keys.create(client, pepper, account_id, name=name, **settings)
    _warn_unknown_models(client, settings.get("allowed_models"))
    result = {"key": made["key"], **made}  # the key object; the full key first, shown this once
    emit(result, table=kv_table("new API key", result))
    if not json_mode():
        warn("the full key is shown only this once; store it now (only its prefix and last four are kept)")


@key.command("update")
@click.argument("key_id")
@_setting_options
@click.option("--no-monthly-limit", is_flag=True, help="Remove the monthly limit.")
@click.option("--all-models", is_flag=True, help="Allow every model again.")
@click.option("--no-expiry", is_flag=True, help="The key never expires.")
@json_option
def update(key_id: str, name, monthly_limit, allowed_models, rpm, expires, no_monthly_limit,
           all_models, no_expiry, as_json) -> None:
    """Change a key's settings; the others stay as they are. Every gateway node applies the
    change from the next request on. A revoked key cannot be changed.

    \b
    Examples:
      upgate-admin key update 9f2c4e1a0b3d5c7e --rpm 300 --no-monthly-limit
      upgate-admin key update 9f2c4e1a0b3d5c7e --allowed-models acme/chat-1 --expires 2027-03-20
    """
    for given, clear, a, b in ((monthly_limit, no_monthly_limit, "--monthly-limit", "--no-monthly-limit"),
                               (allowed_models, all_models, "--allowed-models", "--all-models"),
                               (expires, no_expiry, "--expires", "--no-expiry")):
        if given is not None and clear:
            raise Refused(f"{a} and {b} contradict each other: give one")
    with refusals():
        changes = _parse_settings(monthly_limit, allowed_models, rpm, expires)
        if name is not None:
            changes["name"] = name
        if no_monthly_limit:
            changes["monthly_limit_micro"] = None
        if all_models:
            changes["allowed_models"] = None
        if no_expiry:
            changes["expires_at_ms"] = None
        if not changes:
            raise Refused("nothing to change: give at least one option (see --help)")
        client = _client()
        result = keys.update(client, key_id, **changes)
    _warn_unknown_models(client, changes.get("allowed_models"))
    emit(result, table=kv_table(f"key {key_id} updated", result))


@key.command("revoke")
@click.argument("key_id")
@json_option
def revoke(key_id: str, as_json: bool) -> None:
    """Revoke a key for good: its next request, on any gateway node, gets 401. Streams
    already running finish and are billed. A revoked key never returns.

    \b
    Example:
      upgate-admin key revoke 9f2c4e1a0b3d5c7e
    """
    with refusals():
        client = _client()
        obj, changed = keys.revoke(client, key_id)
    note = "" if changed else " (it already was revoked)"
    emit(dict(obj, revoked=True, changed=changed),
         message=f"key {key_id} ({keys.display(obj['prefix'], obj['last4'])}) revoked{note}")


@key.command("list")
@click.argument("account_id")
@json_option
def list_(account_id: str, as_json: bool) -> None:
    """List an account's keys (prefix and last four only), with limits, this Jalali month's
    spend and state (active, expired, revoked).

    \b
    Example:
      upgate-admin key list 2f0c6a1e-… --json
    """
    with refusals():
        acct = accounts.normalize_id(account_id)
        rows = keys.objects(_client(), acct)
    t = table(f"keys of account {acct}",
              ["key id", "name", "key", "rpm", "monthly limit", "spent this month",
               "allowed models", "expires", "state"],
              [[k["key_id"], k["name"], keys.display(k["prefix"], k["last4"]), k["rpm"],
                k["monthly_limit_toman"] or "no limit", k["spent_this_month_toman"],
                ", ".join(k["allowed_models"]) if k["allowed_models"] is not None else "all",
                k["expires_at"] or "never", k["state"]] for k in rows])
    for column in t.columns:  # ids and amounts must never be cut short with an ellipsis
        column.overflow = "fold"
    emit({"account_id": acct, "keys": rows}, table=t)


@key.command("show")
@click.argument("key_id")
@json_option
def show(key_id: str, as_json: bool) -> None:
    """Show one key (the key object: prefix and last four, never the key).

    \b
    Example:
      upgate-admin key show 9f2c4e1a0b3d5c7e --json
    """
    with refusals():
        obj = keys.get(_client(), key_id)
    emit(obj, table=kv_table(f"key {key_id}", obj))


@key.command("find")
@click.argument("prefix")
@json_option
def find(prefix: str, as_json: bool) -> None:
    """Find keys by what a customer quotes of one: its prefix (sk-up-AbCd) or the shown form
    (sk-up-AbCd…wxyz). Prefixes are not unique; reads every account's keys.

    \b
    Example:
      upgate-admin key find sk-up-AbCd --json
    """
    with refusals():
        rows = keys.find_by_prefix(_client(), prefix)
    t = table(f"{len(rows)} keys", ["key id", "account", "name", "key", "state"],
              [[k["key_id"], k["account_id"], k["name"], keys.display(k["prefix"], k["last4"]), k["status"]]
               for k in rows])
    for column in t.columns:
        column.overflow = "fold"
    emit({"keys": rows}, table=t)
