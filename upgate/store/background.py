"""What every background loop of a node (reaper, sweeper, subscriber, catalog poll) shares."""
from __future__ import annotations

import asyncio


def stop_if_cancelled() -> None:
    """Raise CancelledError when this task has been asked to stop, even if the cancellation got
    lost on its way: Python 3.11's asyncio.wait_for (redis-py wraps every send in it) can swallow
    a cancel that races the awaited result, and a loop that catches errors and carries on would
    then never stop, hanging the node's shutdown."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
