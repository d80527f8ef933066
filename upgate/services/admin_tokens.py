"""Admin tokens: what the management API (and the console) accept as `Authorization: Bearer`.

Format: ``upa_`` + 40 characters from [A-Za-z0-9] drawn with ``secrets``. Only the HMAC of a
token under the deployment's key pepper is stored (``keys.digest``); the token itself exists
in `create`'s return value and nowhere else. Lookup is by that HMAC (one HGET), never by
comparing secrets one after the other.

Records (all under the hash tag ``{admin}``, so they share one cluster slot; see keyspace):

- ``keyspace.ADMIN_TOKENS`` hash: HMAC → JSON ``{"name", "read_only", "created_at"}``.
- ``keyspace.ADMIN_TOKEN_NAMES`` hash: name → HMAC (names are unique; `revoke NAME` finds
  the token).
- ``keyspace.ADMIN_TOKEN_USED`` hash: name → unix seconds of the last accepted request
  (written at most once a minute per node: see `upgate.handlers.admin.auth`).

Revocation deletes both entries and publishes ``{"t": "admin_token", "hash": <hmac>}`` on
``keyspace.CHANNEL``: every node drops its cached entry at once, as for client keys. Creation
publishes the same event, so nodes reload their set of live HMACs (`live_hashes`).

Sync clients only (``redis.Redis`` / ``redis.RedisCluster``), like accounts.py and keys.py.
"""
from __future__ import annotations

import re
import secrets
import string
import time
from dataclasses import dataclass

import orjson

from upgate.store import connection as store, keyspace
from upgate.services.accounts import atomic_write
from upgate.services.keys import digest
from upgate.errors import Reasoned

TOKEN_PREFIX = "upa_"
TOKEN_BODY_LENGTH = 40
_TOKEN_SHAPE = re.compile(r"upa_[A-Za-z0-9]{40}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ALPHABET = string.ascii_letters + string.digits


class AdminTokenError(Reasoned):
    """A refused admin-token operation: one line for the operator; nothing was written."""

    field = "name"


class InvalidTokenName(AdminTokenError):
    """A name is not 1 to 64 characters of letters, digits, `_`, `.` or `-`."""

    reason = "token_name_invalid"


class TokenNameTaken(AdminTokenError):
    """A live token already has this name."""

    reason = "token_name_taken"


class UnknownToken(AdminTokenError):
    """No live token has this name."""

    reason = "token_unknown"


class PepperMissing(AdminTokenError):
    """No HMAC pepper to hash a token with."""

    reason = "pepper_missing"

    field = None


@dataclass(frozen=True)
class AdminToken:
    name: str
    read_only: bool


def generate() -> str:
    return TOKEN_PREFIX + "".join(secrets.choice(ALPHABET) for _ in range(TOKEN_BODY_LENGTH))


def well_formed(token) -> bool:
    """The shape `generate` makes: anything else is refused before any lookup."""
    return isinstance(token, str) and _TOKEN_SHAPE.fullmatch(token) is not None


def check_name(name) -> str:
    text = name.strip() if isinstance(name, str) else ""
    if not _NAME.fullmatch(text):
        raise InvalidTokenName(f"an admin token's name is 1 to 64 letters, digits, '_', '.' or '-' "
                               f"(starting with a letter or digit), got {name!r}")
    return text


def _pepper(pepper: str) -> str:
    if not isinstance(pepper, str) or not pepper:
        raise PepperMissing("no key pepper: set UPGATE_KEY_PEPPER to the gateway's value")
    return pepper


def create(client, pepper: str, name: str, read_only: bool = False) -> dict:
    """A new token → ``{"name", "token", "read_only"}``: the only time the token is seen."""
    name = check_name(name)
    pepper = _pepper(pepper)
    token = generate()
    h = digest(token, pepper)
    # Claiming the name is the atomic check (HSETNX); the token goes live after it. A crash in
    # between leaves a name without a token, which `revoke NAME` clears.
    if not client.hsetnx(keyspace.ADMIN_TOKEN_NAMES, name, h):
        raise TokenNameTaken(f"an admin token named {name!r} exists (revoke it first)")
    record = {"name": name, "read_only": bool(read_only), "created_at": int(time.time())}
    client.hset(keyspace.ADMIN_TOKENS, h, orjson.dumps(record))
    # nodes reload their set of live HMACs (`live_hashes`): a throttled address gets in with it
    client.publish(keyspace.CHANNEL, orjson.dumps({"t": "admin_token", "hash": h}))
    return {"name": name, "token": token, "read_only": bool(read_only)}


def list_tokens(client) -> list[dict]:
    """Every live token, by name: ``{"name", "read_only", "created_at", "last_used_at"}``
    (unix seconds; last_used_at None = never used). Never a token, never an HMAC."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keyspace.ADMIN_TOKEN_NAMES)
    pipe.hgetall(keyspace.ADMIN_TOKEN_USED)
    names, used = (store.text_map(x) for x in pipe.execute())
    records = client.hmget(keyspace.ADMIN_TOKENS, list(names.values())) if names else []
    out = []
    for (name, _h), raw in zip(names.items(), records):
        rec = orjson.loads(raw) if raw else {}
        last = used.get(name)
        out.append({"name": name, "read_only": bool(rec.get("read_only", False)),
                    "created_at": rec.get("created_at"),
                    "last_used_at": int(last) if last else None})
    out.sort(key=lambda t: t["name"])
    return out


def revoke(client, name: str) -> None:
    """Refused from the next request on, on every node (pub/sub drops the cached entry)."""
    name = check_name(name)
    h = client.hget(keyspace.ADMIN_TOKEN_NAMES, name)
    if h is None:
        raise UnknownToken(f"no admin token named {name!r}")
    h = store.text(h)

    def gone(p):  # one slot ({admin}): one transaction even on a cluster
        p.hdel(keyspace.ADMIN_TOKENS, h)
        p.hdel(keyspace.ADMIN_TOKEN_NAMES, name)
        p.hdel(keyspace.ADMIN_TOKEN_USED, name)

    atomic_write(client, [gone], event={"t": "admin_token", "hash": h})


def verify(client, pepper: str, token, *, touch: bool = True) -> AdminToken | None:
    """The live token's name and rights, or None (malformed, unknown or revoked). One HGET by
    HMAC; `touch` records the time as its last use."""
    if not well_formed(token) or not pepper:
        return None
    raw = client.hget(keyspace.ADMIN_TOKENS, digest(token, pepper))
    if raw is None:
        return None
    rec = orjson.loads(raw)
    if touch:
        client.hset(keyspace.ADMIN_TOKEN_USED, rec["name"], int(time.time()))
    return AdminToken(name=rec["name"], read_only=bool(rec.get("read_only")))


def live_hashes(client) -> frozenset[str]:
    """The HMAC of every live token (a few dozen at most): what a node checks a token against
    while its address is throttled, without a lookup per attempt."""
    return frozenset(store.text(h) for h in client.hkeys(keyspace.ADMIN_TOKENS))


def hash_of(token: str, pepper: str) -> str:
    """What the node's cache is keyed by (the same HMAC revocation publishes)."""
    return digest(token, pepper)
