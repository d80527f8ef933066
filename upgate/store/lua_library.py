"""The Lua scripts in `lua/`, loaded into Redis as one Functions library and called by FCALL.

Why a library and not EVALSHA: a script sent by EVALSHA runs its whole chunk on every call,
so the shared helpers of `lua/_lib.lua` (prepended, since Redis has no `require`) were built
as fresh closures on every call: about 7 µs of a cold store's time per script call, two per
request (docs/performance.md). A library runs its top level once, at FUNCTION LOAD; a call
runs only its function.

The library is `lua/_lib.lua` followed by every other `lua/<name>.lua` wrapped as
`local function(KEYS, ARGV) … end` and registered as `<name>_<version>`, so a script reads its
KEYS and ARGV as it always did. `<version>` is a digest of the library's text: two gateway
versions side by side (a rolling upgrade) each call their own functions and never replace the
other's. A library's load step may not touch redis.call, so `rcall` is bound as each call starts.

Redis keeps functions in its RDB and AOF and sends them to replicas; a store that lost them
(no persistence, FUNCTION FLUSH, a new cluster node) answers "Function not found", and
the caller loads the library (on a cluster, on every primary) and calls again: a function that
was not found did not run. The gateway also loads it as it starts, so a new version's first
requests do not each find it missing. A library of the same name is the same text (the name is
its digest), so a load that finds it there already is done, without REPLACE's recompiling.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path

import redis.exceptions as rexc

LIB = "_lib"  # the helpers every function sees (file name without .lua)
NOT_FOUND = "Function not found"


def _lua_dir():
    """Source checkout (tests run from the repo root, which shadows the install): the
    top-level `lua/` beside the package — first, since an editable install maps `upgate.lua`
    to the checkout it was installed from, not this one. Installed: package data `upgate.lua`."""
    local = Path(__file__).resolve().parents[2] / "lua"
    if (local / "settle.lua").is_file():
        return local
    return resources.files("upgate.lua")


def _names(folder) -> list[str]:
    return sorted(p.name[:-4] for p in folder.iterdir()
                  if p.name.endswith(".lua") and not p.name.startswith("_"))


@lru_cache(maxsize=None)
def library() -> tuple[str, str]:
    """(the library's source for FUNCTION LOAD, its version suffix)."""
    folder = _lua_dir()
    parts = [folder.joinpath(LIB + ".lua").read_text(encoding="utf-8")]
    for name in _names(folder):
        body = folder.joinpath(name + ".lua").read_text(encoding="utf-8")
        flags = ""
        if body.startswith("#!lua flags="):  # a script's own flags (no-writes, ...) become the function's
            shebang, body = body.split("\n", 1)
            flags = ", flags = {%s}" % ", ".join(f"'{f}'" for f in shebang.split("=", 1)[1].split(","))
        if body.startswith("#!") or "\r" in body:  # would land inside the function: no library at all
            raise ValueError(f"lua/{name}.lua: only a first line '#!lua flags=...' and LF line ends")
        parts.append(f"local function fn_{name}(KEYS, ARGV)\n  rcall = redis.call\n{body}\nend\n"
                     f"redis.register_function{{function_name = '{name}_@V', callback = fn_{name}{flags}}}\n")
    text = "\n".join(parts)
    version = hashlib.sha1(text.encode()).hexdigest()[:16]
    return f"#!lua name=upgate_{version}\n" + text.replace("_@V'", f"_{version}'"), version


def function_name(name: str) -> str:
    return f"{name}_{library()[1]}"


def not_found(exc: BaseException) -> bool:
    """The store has no such function (it never had the library, or lost it): nothing ran.
    (redis-py puts the command before the message of an error inside a pipeline.)"""
    return isinstance(exc, rexc.ResponseError) and str(exc).endswith(NOT_FOUND)


async def call(client, send):
    """`await send()`; when the store has not got the function, load the library and send it once
    more (a function that was not found did not run). The hot path (store.Script) does the
    same inline, one coroutine fewer a call."""
    try:
        return await send()
    except rexc.ResponseError as e:
        if not not_found(e):
            raise
    await load(client)
    return await send()


def call_sync(client, send):
    """call() for the blocking client."""
    try:
        return send()
    except rexc.ResponseError as e:
        if not not_found(e):
            raise
    load_sync(client)
    return send()


def _targets(client) -> list[dict]:
    """Where to load: each primary of a cluster, one by one (so that one that has the library
    does not stop the others from being given it); the client itself otherwise."""
    if hasattr(client, "get_primaries"):
        return [{"target_nodes": node} for node in client.get_primaries()]
    return [{}]


def _loaded(exc: rexc.ResponseError) -> None:
    if "already exists" not in str(exc):
        raise exc


async def load(client) -> None:
    for where in _targets(client):
        try:
            await client.execute_command("FUNCTION LOAD", library()[0], **where)
        except rexc.ResponseError as e:
            _loaded(e)


def load_sync(client) -> None:
    for where in _targets(client):
        try:
            client.execute_command("FUNCTION LOAD", library()[0], **where)
        except rexc.ResponseError as e:
            _loaded(e)
