"""Remove what identifies the upstream from a provider's text before a client sees it.

`client_text` is the one exit for provider text (error messages and codes, whatever the HTTP
status they came with): every path that can carry a provider's words to a client goes through
it. Each secret is replaced by "[redacted]" so the sentence still reads:

- our key for that provider, plain, URL-encoded, JSON-escaped, and masked as providers print
  keys back (`sk-...abcd`, `****abcd`, `sk-proj-********abcd`);
- any URL (`scheme://`, also URL-encoded `%3A%2F%2F` and JSON-escaped `:\\/\\/`), the configured
  base URL and its host name, with or without the port;
- key shapes of any provider (`sk-`, `sk_live_`, `sk-ant-`, `sk-proj-`, `gsk_`, `xai-`, `AIza`,
  `AKIA`, `hf_`, ...), bearer tokens and `org-` ids;
- IP address literals (v4 and v6), and internal host names (`*.internal`, `*.local`,
  `*.svc.cluster.local`, `localhost`, ...).

The upstream model id is replaced by the client's (a provider's "model=missing" reads
"model=acme/missing", as the client named it).
"""
from __future__ import annotations

import ipaddress
import re
from urllib.parse import quote, quote_plus, urlsplit

import orjson

REDACTED = "[redacted]"

_URL = re.compile(r"\b[a-z][a-z0-9+.\-]*(?::|%3a|%253a)(?:\\?/|%2f|%252f){2}[^\s\"'<>()\[\]{}]*",
                  re.IGNORECASE)
_BEARER = re.compile(r"(?<=\bBearer )\s*[^\s\"']+", re.IGNORECASE)  # keep the word, drop the token
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|rk|pk|gsk|xai|hf|ghp|gho|glpat|org)[-_]"
    r"(?:[A-Za-z0-9_\-*\u2026\u2022]|\.+(?=[A-Za-z0-9_\-*\u2026\u2022])){3,}"
    r"|(?<![A-Za-z0-9])(?:AIza|AKIA|ASIA)[A-Za-z0-9_\-]{8,}")
# masked secrets printed back: a run of mask characters with key characters on either side
_MASKED = re.compile(r"[A-Za-z0-9_\-]*(?:\*{3,}|\u2022{3,}|x{6,})[A-Za-z0-9_\-]{2,}")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:.])\[?[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:%\w+)?\]?(?![\w:])")
_HOSTS = re.compile(r"(?<![\w.\-])(?:[a-z0-9\-]+\.)*(?:[a-z0-9\-]+\.(?:internal|local|localdomain|lan|"
                    r"intranet|corp|home\.arpa)|localhost)(?::\d+)?(?![\w\-])", re.IGNORECASE)


def _ip(m: re.Match) -> str:
    text = m.group(0).strip("[]").split("%")[0]
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return m.group(0)  # a time of day, a version number: not an address
    return REDACTED


def _forms(secret: str) -> set[str]:
    """The ways a secret may be printed: plain, URL-encoded, JSON-escaped."""
    return {secret, quote(secret, safe=""), quote_plus(secret), orjson.dumps(secret).decode()[1:-1]}


def _key_masks(key: str) -> list[re.Pattern]:
    """Masked prints of our key: its head, then mask characters or an ellipsis, then maybe its
    tail; or mask characters then its last four characters."""
    head, tail = re.escape(key[:4]), re.escape(key[-4:])
    return [re.compile(head + r"[A-Za-z0-9_\-]*(?:\.{2,}|\u2026|\*+|\u2022+)[A-Za-z0-9_\-]*"),
            re.compile(r"(?:\.{2,}|\u2026|\*+|\u2022+|x{4,})" + tail),
            re.compile(re.escape(key[:6]) + r"[A-Za-z0-9_\-]*")]  # cut short


def scrub(message: str, provider=None) -> str:
    """`message` with upstream-identifying strings replaced; `provider` may be None."""
    # every key of a pool (docs/routes.md), not only the first: any may be the one echoed
    keys = {getattr(provider, "api_key", None) or ""} | {k for _, k in getattr(provider, "keys", ())}
    for key in keys:
        if len(key) < 8:
            continue
        for form in sorted(_forms(key), key=len, reverse=True):
            message = message.replace(form, REDACTED)
        for pattern in _key_masks(key):
            message = pattern.sub(REDACTED, message)
    message = _URL.sub(REDACTED, message)  # whole URLs first, so no path is left dangling
    if provider is not None and provider.base_url:
        for form in _forms(provider.base_url.rstrip("/")):
            message = re.sub(re.escape(form), REDACTED, message, flags=re.IGNORECASE)
        # the bare host, with and without the port ("api.example.com:8443", "api.example.com"),
        # wherever it stands, even glued to other text
        parts = urlsplit(provider.base_url)
        for host in (parts.netloc.rpartition("@")[2], parts.hostname):
            if host:
                message = re.sub(re.escape(host), REDACTED, message, flags=re.IGNORECASE)
    for pattern in (_BEARER, _KEY_SHAPES, _MASKED, _HOSTS):
        message = pattern.sub(REDACTED, message)
    message = _IPV4.sub(_ip, message)
    return _IPV6.sub(_ip, message)


def client_text(text: str, provider=None, model=None) -> str:
    """THE exit for a provider's words toward a client: scrubbed, and the upstream model id
    replaced by the client's (`model`: the catalog entry that was asked, or None)."""
    text = scrub(text, provider)
    upstream, ours = getattr(model, "upstream_model", None), getattr(model, "id", None)
    if upstream and ours and upstream != ours:
        text = re.sub(r"(?<![\w./:\-])" + re.escape(upstream) + r"(?![\w/:\-])", ours, text)
    return text
