"""The reconciliation loop every node runs; one node at a time does the work.

Each tick (UPGATE_PAYMENTS_RECONCILE_S, a minute by default) a node tries to take the lease
`{payments}:reconcile_lock` (SET NX PX, a little shorter than the tick); the one that gets it
runs `service.reconcile` on the node's service pool: open orders verified again, paid ones
credited, unpaid ones expired after UPGATE_PAYMENTS_EXPIRE_S. Two nodes reconciling at once
would still credit once (lua/credit.lua is idempotent by ref); the lease only saves the
gateway from being asked twice.
"""
from __future__ import annotations

import asyncio
import logging

from upgate.payments import service
from upgate.store import keyspace
from upgate.store.background import stop_if_cancelled

log = logging.getLogger("upgate")


async def run(ctx) -> None:
    s = ctx.settings
    lease_ms = max(1, int(s.payments_reconcile_s * 900))
    while True:
        await asyncio.sleep(s.payments_reconcile_s)
        stop_if_cancelled()
        try:
            if not await ctx.redis.set(keyspace.PAYMENTS_LOCK, "1", nx=True, px=lease_ms):
                continue  # another node has this minute
            counts = await ctx.admin.call(service.reconcile, s)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the store or a gateway went away: the next tick tries again
            log.warning("payment reconciliation failed (%s: %s)", type(e).__name__, str(e)[:200])
            continue
        for outcome, n in counts.items():
            ctx.metrics.count_payment(s.payments, outcome, n)
        if counts:
            log.info("payment reconciliation: %s", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
