"""The providers file: where each upstream lives, which key it takes and which dialect it speaks.

```toml
[providers.openrouter]
base_url = "https://openrouter.ai/api/v1"   # chat/completions, embeddings, completions are appended
api_key_env = "OPENROUTER_API_KEY"          # the key itself stays in the environment; a list
                                            # ["KEY_A", "KEY_B"] is a key pool (docs/routes.md)
dialect = "openrouter"                      # or "openai"
bill_by = "provider_cost"                   # optional; default "tokens" (docs/prices.md)
responses = true                            # optional: it serves POST /v1/responses (docs/client-guide.md)
```

The `anthropic` dialect speaks the Messages API (upstream/anthropic.py; its base_url ends in
/v1 as Anthropic's does, and its headers are set by upstream/dialects.py).

`api_key_env` may be left out for a provider that takes no key (the built-in mock). A key
variable that is named but unset only disables that provider (or, in a pool, leaves that key
out), with a warning, so one missing secret does not take the whole gateway down. A pool's
keys are named by their variable (`Provider.keys`): health records and logs never hold a key.
"""

import logging
import os
import tomllib
from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import urlsplit

from upgate.upstream.dialects import DIALECTS

log = logging.getLogger("upgate.upstream")

_KNOWN_KEYS = frozenset(("base_url", "api_key_env", "dialect", "bill_by", "responses"))
# "tokens": the catalog's token prices. "provider_cost": the cost the provider reports per
# request (usage.cost, USD) × the rate and markup of the provider's last `models sync`.
BILL_BY = ("tokens", "provider_cost")


class ProvidersError(Exception):
    """The providers file is missing or invalid; the message is one line for the operator."""


@dataclass(frozen=True)
class Provider:
    name: str
    base_url: str
    api_key: str | None = field(repr=False)  # never in a repr, so never in a log line
    dialect: str
    available: bool
    bill_by: str = "tokens"
    responses: bool = False  # it serves POST /v1/responses: a Responses request goes to it as sent
    # a key pool: (variable name, key) of every set variable, in the file's order; () = one key
    keys: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    pooled: bool = field(init=False, compare=False)  # two or more keys (read on every request)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pooled", len(self.keys) > 1)

    def url(self, path: str) -> str:
        """`url("chat/completions")` → `<base_url>/chat/completions` (`<base_url>/messages` for
        the anthropic dialect, whose base_url ends in /v1 like the others)."""
        if self.dialect == "anthropic" and path == "chat/completions":
            path = "messages"
        return self.base_url.rstrip("/") + "/" + path.lstrip("/")

    def headers(self, api_key: str | None = None) -> dict[str, str]:
        """The request headers, with `api_key` (one of a pool's) or the provider's one key."""
        headers = {"Content-Type": "application/json"}
        key = api_key or self.api_key
        if key:
            headers["Authorization"] = "Bearer " + key
        return headers


def load_providers(path: str | os.PathLike, environ: Mapping[str, str] | None = None
                   ) -> dict[str, Provider]:
    """Read and check the providers TOML file; raise ProvidersError on anything wrong."""
    env = os.environ if environ is None else environ
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ProvidersError(f"providers file not found: {path}") from None
    except OSError as e:
        raise ProvidersError(f"cannot read providers file {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ProvidersError(f"providers file {path} is not valid TOML: {e}") from None
    table = doc.get("providers")
    if not isinstance(table, dict) or not table:
        raise ProvidersError(f"providers file {path} has no [providers.NAME] table")
    return {name: _provider(path, name, conf, env) for name, conf in table.items()}


def _provider(path, name: str, conf: object, env: Mapping[str, str]) -> Provider:
    where = f"{path}: [providers.{name}]"
    if not isinstance(conf, dict):
        raise ProvidersError(f"{where} must be a table")
    unknown = sorted(set(conf) - _KNOWN_KEYS)
    if unknown:
        raise ProvidersError(f"{where} has unknown key(s): {', '.join(unknown)}")
    base_url = conf.get("base_url")
    if not isinstance(base_url, str) or not base_url:
        raise ProvidersError(f"{where} needs base_url")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProvidersError(f"{where} base_url must be an http(s) URL, got {base_url!r}")
    dialect = conf.get("dialect", "openrouter")
    if dialect not in DIALECTS:
        raise ProvidersError(
            f"{where} has unknown dialect {dialect!r} (expected one of: {', '.join(DIALECTS)})")
    bill_by = conf.get("bill_by", "tokens")
    if bill_by not in BILL_BY:
        raise ProvidersError(f"{where} bill_by must be one of: {', '.join(BILL_BY)}; got {bill_by!r}")
    responses = conf.get("responses", False)
    if not isinstance(responses, bool) or (responses and dialect == "anthropic"):
        raise ProvidersError(f"{where} responses must be true or false (and false for the anthropic dialect)")
    key_env = conf.get("api_key_env")
    api_key = None
    available = True
    keys: tuple[tuple[str, str], ...] = ()
    if isinstance(key_env, list):
        if not key_env or not all(isinstance(k, str) and k for k in key_env) or len(set(key_env)) < len(key_env):
            raise ProvidersError(f"{where} api_key_env must be a variable name or a list of distinct names")
        for var in key_env:
            if not env.get(var):
                log.warning("provider %s: key pool variable %s is not set; left out of the pool", name, var)
        keys = tuple((var, env[var]) for var in key_env if env.get(var))
        if not keys:
            log.warning("provider %s disabled: no variable of its key pool is set", name)
            available = False
        else:
            api_key = keys[0][1]
    elif key_env is not None:
        if not isinstance(key_env, str) or not key_env:
            raise ProvidersError(f"{where} api_key_env must be an environment variable name")
        api_key = env.get(key_env) or None
        if api_key is None:
            log.warning("provider %s disabled: environment variable %s is not set", name, key_env)
            available = False
    return Provider(name=name, base_url=base_url, api_key=api_key, dialect=dialect,
                    available=available, bill_by=bill_by, keys=keys, responses=responses)
