"""The body work of a large request, off the event loop (docs/security.md, "Large bodies").

Parsing, translating (Messages → chat), validating and estimating the prompt of a body are
linear in its values, but 90,000 one-character messages (2.7 MB, inside every limit) are
hundreds of milliseconds of Python: run on the loop, every other request of the node waits
that long. A body over OFF_LOOP_BYTES is worked on one of POOL_THREADS threads instead; the
loop serves the others meanwhile (a thread of pure Python gives the loop the interpreter
back every few milliseconds). A small body, every ordinary request, stays on the loop: a
thread hop would cost it more than its work.

Only refusals that need no body (401 before the body is read, 429 and 402 remembered by
billing/refusals.py) come before this; the rest need the parsed body.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

OFF_LOOP_BYTES = 128 * 1024  # below this, the whole body's work is a few milliseconds
POOL_THREADS = 2  # large bodies queue here, and never take the service layer's workers

_pool: ThreadPoolExecutor | None = None


async def run(size: int, fn, *args):
    """fn(*args): inline for a body of `size` bytes up to OFF_LOOP_BYTES, else on the pool."""
    if size <= OFF_LOOP_BYTES:
        return fn(*args)
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=POOL_THREADS, thread_name_prefix="upgate-body")
    return await asyncio.get_running_loop().run_in_executor(_pool, fn, *args)
