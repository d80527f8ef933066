"""Price sync as every face runs it: the checks on the operator's input (the CLI's options, the
API's body, the console's form carry the same names: source, provider, usd_toman, markup,
include, prune, dry_run, max_change, yes) and the answer, `{"version", "changed", "added",
"removed", "unchanged"}` as `models sync --json` prints it. The sync itself is
upgate/catalog/store.py's.

A source given over HTTP (the management API, the console) must be an http(s) URL: a path
would name a file on the node, which is neither the operator's file nor anything a remote
caller should make the node read."""
from __future__ import annotations

from upgate.catalog import price_sync, store as catalog_store
from upgate.catalog.price_sync import SyncError

MAX_INCLUDE = 100  # globs per sync; more is a mistake, not a selection


def check_include(include) -> tuple[str, ...]:
    if include is None:
        return ()
    if isinstance(include, str) or not isinstance(include, (list, tuple)) or len(include) > MAX_INCLUDE \
            or not all(isinstance(g, str) and 0 < len(g) <= 200 and g.isprintable() for g in include):
        raise SyncError(f"include must be a list of at most {MAX_INCLUDE} globs like \"openai/*\"", "include")
    return tuple(include)


def sync(client, *, source, provider, usd_toman, markup="1", include=(), prune=False, dry_run=False,
         max_change="30", yes=False, provider_names: set[str], remote: bool,
         timeout_s: float = catalog_store.SOURCE_TIMEOUT_S) -> dict:
    """Run a price sync; its JSON answer. `remote`: the caller is not on the node (API,
    console), so the source must be a URL. Raises SyncError (nothing written), or
    catalog_store.ChangeTooLarge (`.outcome`: the plan) over `max_change` without `yes`."""
    for name, value in (("source", source), ("provider", provider)):
        if not isinstance(value, str) or not value.strip():
            raise SyncError(f"{name} is required", name)
    for name, value in (("prune", prune), ("dry_run", dry_run), ("yes", yes)):
        if not isinstance(value, bool):
            raise SyncError(f"{name} must be true or false", name)
    source = source.strip()
    if remote and price_sync.source_url(source) is None:
        raise SyncError("source must be an http:// or https:// URL (a file is read only by the CLI, "
                        "on the operator's machine)", "source")
    outcome = catalog_store.sync(client, source, provider=provider.strip(), usd_toman=usd_toman, markup=markup,
                                 include=check_include(include), prune=prune, dry_run=dry_run,
                                 max_change=max_change, confirmed=yes, provider_names=provider_names,
                                 timeout_s=timeout_s)
    return outcome.to_json()  # the sync's JSON, as `models sync --json` prints it


def shown_source(source) -> str:
    """A source as the admin log keeps it: a URL without its query or credentials (a token may
    ride in either)."""
    text = str(source)
    if "://" not in text:
        return text
    from urllib.parse import urlsplit

    try:
        u = urlsplit(text)
        port = f":{u.port}" if u.port else ""
        return f"{u.scheme}://{u.hostname or ''}{port}{u.path}"
    except ValueError:
        return "(a malformed URL)"
