"""Run gateway nodes: one process or N pre-forked workers on one port, graceful on SIGTERM.

Shutdown (what a PaaS sends before it kills a dyno): stop accepting, let running requests and
streams finish for up to the grace period, then cut the rest with partial settlement, so that
nothing stays held.
"""
from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import socket
import sys
import time

import tornado.netutil

from upgate.app import make_app
from upgate.context import Context
from upgate.handlers.base import header_block_refusal
from upgate.http.connection import HTTP1Server, use_uvloop
from upgate.settings import Settings

log = logging.getLogger("upgate")

HEADER_BLOCK_MAX = 64 * 1024  # bytes of a request's start line and headers


class BindError(OSError):
    """The listening socket could not be opened (port in use, no permission, out of range)."""


async def start_node(settings: Settings, providers: dict, sockets, client=None):
    """Start one node on already-bound sockets; returns (ctx, server)."""
    ctx = Context(settings, providers, client=client)
    await ctx.start()
    server = HTTP1Server(make_app(ctx), max_body_size=1 << 40,  # handlers enforce the limit with a 413
                         # a header block past 64 KB (or 100 lines) is answered 431 and closed
                         max_header_size=HEADER_BLOCK_MAX, idle_timeout_s=75, body_timeout_s=300,
                         too_large=header_block_refusal)
    await server.listen(sockets)
    return ctx, server


async def drain(ctx: Context, server, grace_s: float) -> None:
    ctx.draining = True
    server.stop()  # no new connections; open ones keep their requests
    deadline = time.monotonic() + grace_s
    while ctx.inflight and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if ctx.inflight:
        log.warning("grace period over: cutting %d open requests with partial settlement", len(ctx.inflight))
        for handler in list(ctx.inflight.values()):
            handler.abort()
        cut_deadline = time.monotonic() + 10
        while ctx.inflight and time.monotonic() < cut_deadline:
            await asyncio.sleep(0.05)
    if ctx.signin.sending:  # sign-in codes on their way (sent in the background, ≤ 15 s each)
        try:
            await asyncio.wait_for(ctx.signin.drain(), max(0.5, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            log.warning("grace period over: %d sign-in texts not sent", len(ctx.signin.sending))
    await server.close_all_connections()
    await ctx.stop()


async def serve_forever(settings: Settings, providers: dict, sockets, ready=None, client=None) -> None:
    ctx, server = await start_node(settings, providers, sockets, client=client)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(ctx)
    await stop.wait()
    await drain(ctx, server, settings.shutdown_grace_s)


def bind(port: int, host: str = "") -> list[socket.socket]:
    if not 0 <= port <= 65535:  # getaddrinfo would quietly wrap it around
        raise BindError(f"cannot listen on port {port}: a port is 0 to 65535")
    try:
        return tornado.netutil.bind_sockets(port, host or None, reuse_port=False)
    except OSError as e:
        where = f"{host}:{port}" if host else f"port {port}"
        raise BindError(f"cannot listen on {where}: {e.strerror or e}") from None


def address(host: str, sockets: list[socket.socket]) -> str:
    """The URL a client on this machine would use (the port as bound, so port 0 shows the real one)."""
    port = sockets[0].getsockname()[1]
    shown = host or "0.0.0.0"
    if ":" in shown:  # an IPv6 literal
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def check_store(url: str) -> None:
    """Refuse a Redis that may evict keys (money) before serving: raises EvictingStore; and data
    a newer release migrated (upgate/migrations/): raises DataTooNew. Warns about a store that
    does not persist, and about data that needs `upgate-admin migrate`. A store that does not answer yet is checked by each node
    once it does (Context._check_store)."""
    import redis

    from upgate.store import connection as store, policy as store_policy

    if url.startswith("memory://"):
        return
    from upgate import migrations

    try:
        client = store.connect_sync(url)
        try:
            warnings = store_policy.check(client, url)
            pending = migrations.check(client)  # DataTooNew: refused, like an evicting store
            if pending:
                warnings = [*warnings, pending]
        finally:
            client.close()
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as e:
        log.debug("store policy not checked at start-up (%s): each node checks it when the store "
                  "answers", type(e).__name__)
        return
    for w in warnings:
        log.warning("%s", w)


def raise_fd_limit() -> int:
    """Every open stream holds two sockets (its client's and its provider's), so the common soft
    limit of 1,024 descriptors would cap a node near 500 streams: raise it to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-file limit from %d (%s)", soft, e)
    return soft


def run(settings: Settings, providers: dict, port: int, processes: int, host: str = "") -> None:
    """`host` "" listens on every interface."""
    raise_fd_limit()
    sockets = bind(port, host)
    check_store(settings.redis_url)
    if settings.topup_url_is_placeholder:  # every 402 would send customers to a dead address
        # (here, once the settings proved workable: a refused start says one line, its error)
        log.warning("neither UPGATE_PUBLIC_URL (the dashboard's top-up page) nor UPGATE_TOPUP_URL is "
                    "set: 402 answers give customers the placeholder %s as where to top up", settings.topup_url)
    log.info("listening on %s%s", address(host, sockets),
             f" ({processes} worker processes)" if processes > 1 else "")
    if processes > 1:
        _prefork(processes)
    use_uvloop()
    asyncio.run(serve_forever(settings, providers, sockets))


def _prefork(n: int) -> None:
    """Fork n workers sharing the listening sockets. The parent forwards SIGTERM/SIGINT to
    them, restarts a worker that crashed, and exits when all have stopped. Returns in workers."""
    children: dict[int, int] = {}
    stopping = False

    def spawn(i: int) -> bool:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            return True
        children[pid] = i
        return False

    def forward(signum, _frame) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    for i in range(n):
        if spawn(i):
            return
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        i = children.pop(pid, None)
        _metrics_process_dead(pid)
        if i is None or stopping:
            continue
        if os.waitstatus_to_exitcode(status) != 0:
            log.warning("worker %d (pid %d) died; restarting it", i, pid)
            time.sleep(0.5)
            if spawn(i):
                return
    sys.exit(0)


def _metrics_process_dead(pid: int) -> None:
    """Drop a dead worker's live gauges (open streams, requests in flight) from /metrics."""
    from upgate.handlers.metrics import multiprocess

    if multiprocess():
        from prometheus_client import multiprocess as mp

        mp.mark_process_dead(pid)
