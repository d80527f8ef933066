"""upgate/store/keyspace.py: the hot path's one-call key builder names exactly what the one-name
functions name, on one Redis and on a Cluster (where three indexes are per-slot shards)."""
from __future__ import annotations

import binascii
import uuid

import pytest

from upgate.store import keyspace as k


@pytest.mark.parametrize("sharded", [False, True])
def test_hot_keys_are_the_named_keys(sharded):
    for _ in range(50):
        a = str(uuid.uuid4())
        assert k.hot_keys(a, sharded) == (
            k.wallet(a), k.streams(a), k.holds(a), k.requests(a), k.outbox(a), k.outbox_state(a),
            k.reap_index(a, sharded), k.outbox_index(a, sharded), k.request_index_prefix(a, sharded),
            k.key_record(a, ""), k.rpm(a, ""), k.hold(a, ""), k.free(a, ""), k.usage(a, ""))
        if sharded:  # every name of the account lands in its own slot
            assert {_key_slot(x) for x in k.hot_keys(a, True)[:8]} == {k.slot(a)}


def _key_slot(name: str) -> int:
    """Redis Cluster's slot of a key name: CRC16 of the text inside its first {...}."""
    inside = name[name.index("{") + 1:name.index("}", name.index("{"))]
    return binascii.crc_hqx(inside.encode(), 0) % k.SLOTS
