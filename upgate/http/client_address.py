"""The source address of a request, for the throttles on failed authentication (client keys
and admin tokens): the TCP peer, or — only when the peer is a trusted proxy
(``UPGATE_TRUSTED_PROXIES``: addresses or CIDRs, or ``*`` for "every peer is the platform's
router") — the rightmost X-Forwarded-For entry that is not itself a trusted proxy. A header
from anyone else is ignored: a client could write any address into it.
"""
from __future__ import annotations

import ipaddress


class ClientAddress:
    def __init__(self, trusted: str = ""):
        self._trusted = _networks(trusted)

    def __call__(self, request) -> str:
        peer = request.remote_ip
        if not self._trusted or not _in(peer, self._trusted):
            return peer
        hops = [h.strip() for h in (request.headers.get("X-Forwarded-For") or "").split(",") if h.strip()]
        for hop in reversed(hops):
            if not _in(hop, self._trusted):
                return hop
        return peer


def _networks(spec: str):
    spec = (spec or "").strip()
    if spec == "*":
        return ["*"]
    return [ipaddress.ip_network(part.strip(), strict=False) for part in spec.split(",") if part.strip()]


def _in(addr: str, nets) -> bool:
    if nets == ["*"]:
        return True
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in n for n in nets)
