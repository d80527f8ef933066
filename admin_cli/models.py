"""`upgate-admin models`: load the model catalog from a TOML file, list the one in force."""
from __future__ import annotations

import os

import click

from admin_cli.output import OverLimit, Refused, emit, json_option, table, warn
from upgate.billing import jalali
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.catalog.rules import CatalogError
from upgate.catalog.price_sync import SyncError


def _iso(ts: float | None) -> str | None:
    return jalali.utc_iso(ts) if ts else None


def _providers_file(providers_path: str | None) -> str:
    explicit = providers_path is not None
    providers_path = providers_path or os.environ.get("UPGATE_PROVIDERS") or "providers.toml"
    if not os.path.isfile(providers_path):
        how = "" if explicit else " (from $UPGATE_PROVIDERS or the default)"
        raise Refused(f"providers file {providers_path}{how} not found: pass --providers FILE "
                      "so the catalog's provider names can be checked")
    return providers_path


_providers_option = click.option(
    "--providers", "providers_path", metavar="FILE",
    help="The providers TOML whose [providers.NAME] tables the catalog may name "
         "(default: $UPGATE_PROVIDERS, else providers.toml).")


@click.group()
def models() -> None:
    """The model catalog: ids, prices (toman), capabilities, visibility."""


@models.command("load")
@click.argument("file", type=click.Path(dir_okay=False))
@_providers_option
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

    providers_path = _providers_file(providers_path)
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

    client = redis_client()
    version, updated, items = catalog_store.read(client)
    created = int(updated or 0)
    result = {"models": [catalog.admin_record(m, created) for m in items],
              "version": version, "prices_updated_at": _iso(updated),
              "price_syncs": catalog_store.read_syncs(client)}
    rows = []
    for m in items:
        p = catalog.model_record(m, created)["svc_pricing"]
        rows.append([m.id, m.provider, m.upstream_model, p["prompt_toman_per_million"],
                     p["cached_prompt_toman_per_million"], p["completion_toman_per_million"], p["request_toman"],
                     ", ".join(sorted(m.capabilities)), "yes" if m.hidden else "no"])
    title = (f"catalog version {version}, prices updated at {_iso(updated)}" if version
             else "no catalog loaded (upgate-admin models load FILE)")
    t = table(title, ["id", "provider", "upstream model", "prompt /M", "cached /M", "completion /M",
                      "request fee", "capabilities", "hidden"], rows)
    for column in t.columns:  # ids and amounts must never be cut short with an ellipsis
        column.overflow = "fold"
    emit(result, table=t)


@models.command("routes")
@click.argument("model_id", required=False)
@json_option
def routes_(model_id: str | None, as_json: bool) -> None:
    """Show every route of the catalog (or of MODEL_ID) with its health, shared by all nodes.

    A cold route is skipped until cold_until; failures counts its failures in a row.

    \b
    Example:
      upgate-admin models routes openai/gpt-4o-mini --json
    """
    from admin_cli.main import redis_client
    from upgate.services import routes

    try:
        result = routes.report(redis_client(), model_id)
    except routes.UnknownModel as e:
        raise Refused(str(e)) from None
    rows = [[r["model"], r["provider"], r["upstream_model"], str(r["priority"]), str(r["weight"]),
             r["state"], r["cold_until"] or "", str(r["failures"])] for r in result["routes"]]
    t = table("routes", ["model", "provider", "upstream model", "priority", "weight", "state",
                         "cold until", "failures"], rows)
    for column in t.columns:
        column.overflow = "fold"
    emit(result, table=t)


@models.command("sync")
@click.option("--source", required=True, metavar="URL|FILE",
              help="A model list in OpenRouter's GET /api/v1/models shape.")
@click.option("--provider", required=True, metavar="NAME", help="The [providers.NAME] these prices are for.")
@click.option("--usd-toman", required=True, metavar="RATE", help="Toman per US dollar, e.g. 61500.")
@click.option("--markup", default="1", show_default=True, metavar="FACTOR", help="e.g. 1.15 for 15%.")
@click.option("--include", multiple=True, metavar="GLOB",
              help="Add the source's models whose id matches (repeatable), e.g. 'openai/*'.")
@click.option("--prune", is_flag=True, help="Remove the provider's models the source no longer lists.")
@click.option("--dry-run", is_flag=True, help="Show the changes; change nothing.")
@click.option("--max-change", default="30%", show_default=True, metavar="PCT",
              help="Refuse (exit 3) a price moving further than this, unless --yes.")
@click.option("--yes", is_flag=True, help="Apply a change over --max-change.")
@click.option("--timeout", "timeout_s", type=float, default=catalog_store.SOURCE_TIMEOUT_S,
              show_default=True, metavar="SECONDS", help="Fetching a URL source, in all.")
@_providers_option
@json_option
def sync(source, provider, usd_toman, markup, include, prune, dry_run, max_change, yes, timeout_s,
         providers_path, as_json) -> None:
    """Reprice PROVIDER's models from an upstream model list, in toman.

    toman per million = USD per token × 1,000,000 × RATE × FACTOR, rounded up to six
    fractional digits. Matched models get new prices, --include adds new ones, --prune
    removes the provider's models the source no longer lists; other models stay. The new
    catalog is checked and swapped in like `models load`. Exit codes: 0 applied, dry run or
    nothing to do; 1 refused; 3 over --max-change (nothing written). See docs/prices.md.

    \b
    Example (cron, weekly):
      upgate-admin models sync --source https://openrouter.ai/api/v1/models \\
        --provider openrouter --usd-toman 61500 --markup 1.15 --include 'openai/*' --json
    """
    from admin_cli.main import redis_client

    providers_path = _providers_file(providers_path)
    try:
        names = catalog_store.read_provider_names(providers_path)
        outcome = catalog_store.sync(
            redis_client(), source, provider=provider, usd_toman=usd_toman, markup=markup,
            include=include, prune=prune, dry_run=dry_run, max_change=max_change, confirmed=yes,
            provider_names=names, timeout_s=timeout_s)
    except catalog_store.ChangeTooLarge as e:
        _show_sync(e.outcome, "refused")
        raise OverLimit(str(e)) from None
    except (SyncError, CatalogError) as e:
        raise Refused(str(e)) from None
    for note in outcome.plan.skipped:
        warn(f"skipped {note}")
    if dry_run and outcome.over_limit:
        warn(f"without --dry-run this would be refused: {outcome.over_limit}")
    _show_sync(outcome, "dry run" if dry_run else "applied" if outcome.applied else "nothing to do")


def _show_sync(outcome: catalog_store.SyncOutcome, state: str) -> None:
    def arrow(old, new):
        return new if old is None else old if new is None else old if old == new else f"{old} → {new}"
    rows = []
    for c in outcome.plan.changes:
        r = c.row()
        rows.append([r["model"], c.kind,
                     arrow(r["old_prompt_toman_per_million"], r["new_prompt_toman_per_million"]),
                     arrow(r["old_completion_toman_per_million"], r["new_completion_toman_per_million"]),
                     "new" if c.kind == "added" else "from 0" if r["change_pct"] is None
                     else r["change_pct"] + "%"])
    plan = outcome.plan
    counts = (f"{len(plan.of('changed'))} changed, {len(plan.of('added'))} added, "
              f"{len(plan.of('removed'))} removed, {plan.unchanged} unchanged")
    t = table(f"models sync ({state}): {counts}", ["model", "change", "prompt /M", "completion /M", "%"], rows)
    for column in t.columns:
        column.overflow = "fold"
    tail = f"catalog version {outcome.version}" if outcome.applied else f"{state}: nothing written"
    emit(outcome.to_json(), table=t if rows else None, message=f"{counts}; {tail}")

