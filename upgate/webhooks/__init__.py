"""Webhooks (docs/webhooks.md): signed events about accounts, delivered at least once.

events.py   the body, the signature and the retry schedule (pure)
outbox.py   the mover: each account's outbox (written by the Lua steps) → the one stream
delivery.py every node's consumer: attempts, retries, take-over from dead nodes
service.py  what the operator calls (sync): failed deliveries, `webhook test`
"""
