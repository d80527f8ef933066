"""`python -m bench.timeline_boot -- <gateway command>`: the gateway, with a timestamp taken at
each step of every request (bench/timeline.py reads them). Nothing in upgate is changed: the
steps are marked by wrapping its functions here, so a mark costs this process a Python call or
two (~1 µs) and the gateway without this wrapper pays nothing. The marks go to
$BENCH_TIMELINE_OUT as JSON when the process exits."""
from __future__ import annotations

import atexit
import functools
import os
import runpy
import sys
from time import perf_counter_ns

import orjson

REQUESTS: list[list] = []
_now: list | None = None


def mark(name: str) -> None:
    if _now is not None:
        _now.append((name, perf_counter_ns()))


def _wrap_sync(cls, attr, before=None, after=None):
    fn = getattr(cls, attr)

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        if before:
            mark(before)
        try:
            return fn(*a, **kw)
        finally:
            if after:
                mark(after)
    setattr(cls, attr, wrapper)


def _wrap_async(cls, attr, before=None, after=None):
    fn = getattr(cls, attr)

    @functools.wraps(fn)
    async def wrapper(*a, **kw):
        if before:
            mark(before)
        try:
            return await fn(*a, **kw)
        finally:
            if after:
                mark(after)
    setattr(cls, attr, wrapper)


def install() -> None:
    from upgate.billing.ledger import Ledger
    from upgate.handlers.base import BaseHandler
    from upgate.handlers.proxy import ProxyHandler
    from upgate.http.connection import Connection
    from upgate.http.request import Request
    from upgate.upstream.client import UpstreamCall, UpstreamClient

    received = Connection.data_received

    def data_received(self, data):  # a new request's first bytes (concurrency 1, kept alive)
        global _now
        if self.request is None and not self.buf:
            _now = [("recv", perf_counter_ns())]
            REQUESTS.append(_now)
        received(self, data)
    Connection.data_received = data_received
    _wrap_async(ProxyHandler, "post", before="handler")
    _wrap_async(Ledger, "admit", before="admit>", after="admit<")
    _wrap_sync(UpstreamClient, "open", before="upstream>")
    _wrap_async(UpstreamCall, "start", after="headers<")
    _wrap_async(UpstreamCall, "body", after="body<")
    _wrap_async(Ledger, "settle", before="settle>", after="settle<")
    _wrap_sync(Request, "finish", after="written")
    _wrap_sync(BaseHandler, "on_finish", after="done")


def _dump() -> None:
    with open(os.environ["BENCH_TIMELINE_OUT"], "wb") as f:
        f.write(orjson.dumps([[(n, t) for n, t in r] for r in REQUESTS]))


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    # argv: [python, -m, upgate.cli, serve, ...]
    install()
    atexit.register(_dump)
    module = argv[argv.index("-m") + 1]
    sys.argv = [module] + argv[argv.index("-m") + 2:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
