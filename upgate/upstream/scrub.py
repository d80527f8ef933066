"""Remove what identifies the upstream from a provider's error message.

Provider messages reach clients verbatim, minus the provider's base URL and host name,
any URL, bearer tokens, `sk-…` keys, `org-…` ids and our key for that provider. Each is
replaced by "[redacted]" so the sentence still reads.
"""

import re
from urllib.parse import urlsplit

REDACTED = "[redacted]"

_PATTERNS = (
    re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>()\[\]{}]+", re.IGNORECASE),  # any URL
    re.compile(r"(?<=\bBearer )\s*[^\s\"']+", re.IGNORECASE),  # keep the word, drop the token
    re.compile(r"\bsk-[A-Za-z0-9_\-.]+"),
    re.compile(r"\borg-[A-Za-z0-9_\-]+"),
)


def scrub(message: str, provider=None) -> str:
    """`message` with upstream-identifying strings replaced; `provider` may be None."""
    if provider is not None and provider.api_key:
        message = message.replace(provider.api_key, REDACTED)
    for pattern in _PATTERNS:  # whole URLs first, so no path is left dangling
        message = pattern.sub(REDACTED, message)
    if provider is not None:
        message = re.sub(re.escape(provider.base_url.rstrip("/")), REDACTED, message,
                         flags=re.IGNORECASE)
        # the bare host, with and without the port ("api.example.com:8443", "api.example.com")
        parts = urlsplit(provider.base_url)
        for host in (parts.netloc.rpartition("@")[2], parts.hostname):
            if host:
                message = re.sub(r"(?<![\w.-])" + re.escape(host) + r"(?![\w-])", REDACTED,
                                 message, flags=re.IGNORECASE)
    return message
