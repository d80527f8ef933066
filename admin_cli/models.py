"""`upgate-admin models`: load the model catalog from a TOML file, list the one in force."""
from __future__ import annotations

import os

import click

from admin_cli.output import Refused, emit, json_option, table
from upgate import catalog, catalog_store, jalali


def _iso(ts: float | None) -> str | None:
    return jalali.utc_iso(ts) if ts else None


@click.group()
def models() -> None:
    """The model catalog: ids, prices (toman), capabilities, visibility."""


@models.command("load")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--providers", "providers_path", metavar="FILE",
              help="The providers TOML whose [providers.NAME] tables the catalog may name "
                   "(default: $UPGATE_PROVIDERS, else providers.toml).")
@json_option
def load(file: str, providers_path: str | None, as_json: bool) -> None:
    """Validate FILE and replace the catalog with it, atomically; sets prices_updated_at.

    The whole file is checked first: one refused entry refuses the load, and the catalog
    in force stays as it was. Every gateway node picks the new catalog up within moments.

    \b
    Example:
      upgate-admin models load catalog.toml --providers providers.toml
    """
    from admin_cli.main import redis_client

    explicit = providers_path is not None
    providers_path = providers_path or os.environ.get("UPGATE_PROVIDERS") or "providers.toml"
    if not os.path.isfile(providers_path):
        how = "" if explicit else " (from $UPGATE_PROVIDERS or the default)"
        raise Refused(f"providers file {providers_path}{how} not found: pass --providers FILE "
                      "so the catalog's provider names can be checked")
    try:
        items = catalog_store.read_file(file, providers_path)
    except catalog.CatalogError as e:
        raise Refused(str(e)) from None
    version, updated = catalog_store.replace(redis_client(), items)
    count = len(items)
    result = {"models": count, "version": version, "prices_updated_at": _iso(updated)}
    emit(result, message=f"loaded {count} models: catalog version {version}, "
                         f"prices updated at {_iso(updated)}")


@models.command("list")
@json_option
def list_(as_json: bool) -> None:
    """Show the catalog in force, hidden models included (prices in toman).

    \b
    Example:
      upgate-admin models list --json
    """
    from admin_cli.main import redis_client

    version, updated, items = catalog_store.read(redis_client())
    created = int(updated or 0)
    result = {"models": [catalog.admin_record(m, created) for m in items],
              "version": version, "prices_updated_at": _iso(updated)}
    rows = []
    for m in items:
        p = catalog.model_record(m, created)["svc_pricing"]
        rows.append([m.id, m.provider, m.upstream_model, p["prompt_toman_per_million"],
                     p["completion_toman_per_million"], p["request_toman"],
                     ", ".join(sorted(m.capabilities)), "yes" if m.hidden else "no"])
    title = (f"catalog version {version}, prices updated at {_iso(updated)}" if version
             else "no catalog loaded (upgate-admin models load FILE)")
    t = table(title, ["id", "provider", "upstream model", "prompt /M", "completion /M",
                      "request fee", "capabilities", "hidden"], rows)
    for column in t.columns:  # ids and amounts must never be cut short with an ellipsis
        column.overflow = "fold"
    emit(result, table=t)
