"""The account holder's dashboard at /dashboard/: sign-in by phone and SMS code, wallet, keys,
usage, requests, billing and top-up, in Persian first (English one click away). Server-rendered
pages (Tornado templates and one CSS file shipped as package data) over the same service
functions the CLI, the management API and the console call. See docs/dashboard.md.

`routes(ctx)` is the block app.py mounts.
"""
from __future__ import annotations

__all__ = ["routes"]


def routes(ctx) -> list:
    from upgate.dashboard import pages

    return pages.routes(ctx)
