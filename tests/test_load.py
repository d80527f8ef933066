"""Multi-node load: several `upgate serve` processes share one store (a single Redis, then the
local 3-master Redis Cluster) and take concurrent load from many keys of few accounts, mixing
JSON and slow streamed requests, with balances, monthly limits and rpm small enough that every
limit is hit. The count is fixed and the run is bounded in time; loopback only.

At the end, exactly:
- money is conserved: balance = initial − Σ charges the clients were told (svc.cost_toman),
  and the same Σ in the usage aggregate, the access logs and every key's month counter;
  nothing held, no hold record, no stream slot open; /v1/svc/me agrees;
- no overspend: balance ≥ 0 and each key's month counter ≤ its monthly limit + Σ (cost − hold)
  over that key's requests that were charged more than their hold. admit.lua keeps
  spent + open holds + the new hold ≤ limit (and available balance ≥ hold); settle.lua may
  charge above the hold, and only that excess can carry a key (or the wallet) past its bound.
  The mock's usage never exceeds the gateway's conservative hold, so here the excess is 0 and
  the bounds are exact;
- rpm: the run is shorter than 60 s, so each key's Redis rpm window still holds every request
  it counted (with Redis' own admit times): no window (t − 60 s, t] holds more than rpm, and it
  holds exactly the requests the clients saw pass the rpm step (every answer but
  rate_limit_exceeded); at most rpm of them were served;
- streams: never more than 10 open per account, by a sampler of the accounts' slot sets and by
  the clients' own clocks (a stream's slot is surely held from its headers until the mock
  could first have sent its last chunk: send time + 7 chunk delays).
"""
from __future__ import annotations

import collections
import random
import threading
import time

import httpx
import pytest

from tests.gateway import load_catalog
from tests.load_kit import (HELLO, AccountSpec, MockProcess, Sampler, Tally, access_log,
                            assert_settled, max_in_window, max_overlap, micro, seed_accounts, spent,
                            start_gateways, sync_client, timed_chat, wait_for, wallet)
from upgate.billing import money
from upgate.store import keyspace

# a bounded run with rpm windows and stream timings: alone, with both cores (tests/parallel.py)
pytestmark = pytest.mark.serial

ACCOUNTS = 3
MONTHLY_LIMITS = [micro("15"), None, micro("30"), None]  # per key of every account
WORKERS_PER_KEY = 4  # 16 client threads per account: more streams at once than its 10 slots
REQUESTS_PER_WORKER = 16
BALANCE = micro("120")  # about 25 answers' worth
RPM = 25  # 64 attempts a key
MAX_STREAMS = 10
CHUNKS, CHUNK_DELAY_MS = 8, 150  # a stream stays open ≥ 7 × 150 ms at the mock
STREAM_BODY = {"model": "mock/chat-1", "messages": HELLO, "max_tokens": CHUNKS,
               "mock": {"chunks": CHUNKS, "chunk_delay_ms": CHUNK_DELAY_MS}}
JSON_BODY = {"model": "mock/chat-1", "messages": HELLO, "max_tokens": 5, "mock": {"latency_ms": 30}}
TIME_BOUND_S = 40.0  # the load phase; also keeps every counted request inside one rpm window

# every answer the load may get: served, or one of the limits
EXPECTED = {(200, None), (429, "rate_limit_exceeded"), (429, "too_many_concurrent_streams"),
            (429, "key_monthly_limit_reached"), (402, "insufficient_balance")}


@pytest.fixture(scope="module")
def mock_proc():
    mock = MockProcess()
    yield mock
    mock.close()


def _run_load(nodes, accts: list[AccountSpec], seed: int) -> tuple[Tally, float]:
    """WORKERS_PER_KEY threads per key, released together; each sends REQUESTS_PER_WORKER
    requests back to back, round-robin over the nodes: a stream first (so every account opens
    more than 10 at once), then streams and JSON at random."""
    tally = Tally()
    jobs = [(spec, w) for a in accts for spec in a.keys for w in range(WORKERS_PER_KEY)]
    start = threading.Barrier(len(jobs) + 1)
    deadline = [0.0]

    def worker(n: int, spec, w: int) -> None:
        rng = random.Random(seed * 1000 + n)
        with httpx.Client(timeout=30, limits=httpx.Limits(max_keepalive_connections=len(nodes))) as client:
            start.wait()
            for i in range(REQUESTS_PER_WORKER):
                if time.monotonic() > deadline[0]:
                    tally.errors.append(f"worker {n}: time bound reached after {i} requests")
                    return
                stream = i == 0 or rng.random() < 0.5
                node = (n + i) % len(nodes)
                try:
                    tally.add(timed_chat(client, nodes[node].base, spec,
                                         STREAM_BODY if stream else JSON_BODY, stream=stream, node=node))
                except httpx.HTTPError as e:
                    tally.errors.append(f"worker {n} request {i}: {e!r}")

    threads = [threading.Thread(target=worker, args=(n, spec, w), daemon=True)
               for n, (spec, w) in enumerate(jobs)]
    for t in threads:
        t.start()
    deadline[0] = time.monotonic() + TIME_BOUND_S
    t0 = time.monotonic()
    start.wait()
    for t in threads:
        t.join(TIME_BOUND_S + 35)
    wall = time.monotonic() - t0
    assert not any(t.is_alive() for t in threads), "a client thread is stuck"
    return tally, wall


def _check(label: str, url: str, nodes, accts: list[AccountSpec], tally: Tally, wall: float,
           sampler: Sampler) -> None:
    r = sync_client(url)
    outs = tally.outcomes
    total = len(accts) * len(accts[0].keys) * WORKERS_PER_KEY * REQUESTS_PER_WORKER
    assert not tally.errors, tally.errors[:5]
    assert len(outs) == total

    # every answer is a success or a limit: no 5xx, no 401, no broken body
    unexpected = [o for o in outs if (o.status, o.code) not in EXPECTED]
    assert not unexpected, collections.Counter((o.status, o.code) for o in unexpected)
    assert all(o.complete and o.cost > 0 and o.hold > 0 for o in outs if o.status == 200)
    assert all(o.retry_after for o in outs if o.code in ("rate_limit_exceeded", "too_many_concurrent_streams"))

    # nothing left in flight: settle runs before the last byte, so no wait is needed beyond
    # the writes already acknowledged
    wait_for(lambda: all(wallet(r, a.account_id)[1] == 0 for a in accts), 5, "nothing held")

    by_key = collections.defaultdict(list)
    for o in outs:
        by_key[o.key_id].append(o)
    figures = {}
    for a in accts:
        mine = [o for o in outs if o.account_id == a.account_id]
        charged = sum(o.cost for o in mine)
        over_hold = sum(max(0, o.cost - o.hold) for o in mine if o.status == 200)
        codes = collections.Counter(o.code for o in mine)
        # every limit was reached on every account
        for code in ("rate_limit_exceeded", "too_many_concurrent_streams", "insufficient_balance",
                     "key_monthly_limit_reached"):
            assert codes[code] > 0, (a.account_id, code, codes)

        # conservation: the ledger, the usage aggregate, per-key counters and no open hold/slot
        key_charges = {k.key_id: sum(o.cost for o in by_key[k.key_id]) for k in a.keys}
        assert_settled(r, a.account_id, a.initial, charged, key_charges)
        balance, _ = wallet(r, a.account_id)
        assert balance >= -over_hold and over_hold == 0 and balance >= 0, (balance, over_hold)

        for k in a.keys:
            mine_k = by_key[k.key_id]
            # monthly limit: spent ≤ limit + what settles charged above their holds
            if k.monthly_limit is not None:
                excess = sum(max(0, o.cost - o.hold) for o in mine_k if o.status == 200)
                assert spent(r, a.account_id, k.key_id) <= k.monthly_limit + excess
            # rpm: Redis' own window (the run is shorter than 60 s: nothing has left it yet)
            window = r.zrange(keyspace.rpm(a.account_id, k.key_id), 0, -1, withscores=True)
            counted = [o for o in mine_k if o.code != "rate_limit_exceeded"]
            assert len(window) == len(counted), (k.key_id, len(window), len(counted))
            assert max_in_window([score for _, score in window]) <= k.rpm
            assert sum(1 for o in mine_k if o.status == 200) <= k.rpm

        # streams: at most 10 open per account, seen in Redis and from the clients' clocks
        assert sampler.max_slots[a.account_id] <= MAX_STREAMS, sampler.max_slots
        sure_open = [(o.t_headers, o.t_sent + (CHUNKS - 1) * (CHUNK_DELAY_MS - 5) / 1000)
                     for o in mine if o.stream and o.status == 200]
        client_max = max_overlap(sure_open)
        assert client_max <= MAX_STREAMS, client_max

        limited = [(spent(r, a.account_id, k.key_id), k.monthly_limit) for k in a.keys if k.monthly_limit]
        figures[a.account_id] = (charged, codes, client_max, sampler.max_slots[a.account_id], limited)

    # /v1/svc/me tells each key the same story
    with httpx.Client(timeout=10) as c:
        for a in accts:
            for j, k in enumerate(a.keys):
                me = c.get(nodes[j % len(nodes)].base + "/svc/me",
                           headers={"Authorization": f"Bearer {k.key}"}).json()
                charged = figures[a.account_id][0]
                assert me["wallet"]["balance_toman"] == money.fmt(a.initial - charged), me
                assert me["wallet"]["held_toman"] == money.fmt(0)
                assert me["key"]["spent_this_month_toman"] == money.fmt(sum(o.cost for o in by_key[k.key_id]))

    # the access logs of all nodes (flushed on a graceful stop) account for every request
    for g in nodes:
        assert g.stop() == 0
    lines = [d for g in nodes for d in access_log(g) if d["route"] == "/v1/chat/completions"]
    assert len(lines) == total
    prefix_of = {k.key_id: k.prefix for a in accts for k in a.keys}
    logged = collections.Counter((d["account"], d["key"], d["status"], d["code"]) for d in lines)
    seen = collections.Counter((o.account_id, prefix_of[o.key_id], o.status, o.code) for o in outs)
    assert logged == seen
    for a in accts:
        assert sum(d["cost_micro"] for d in lines if d["account"] == a.account_id) == figures[a.account_id][0]
    per_node = collections.Counter(o.node for o in outs)
    assert len(per_node) == len(nodes)

    # the figures (pytest -s shows them)
    statuses = collections.Counter(f"{o.status} {o.code or 'ok'}" for o in outs)
    ok = [o for o in outs if o.status == 200]
    print(f"\n[load {label}] {len(nodes)} nodes, {len(accts)} accounts x {len(accts[0].keys)} keys, "
          f"{len(by_key) * WORKERS_PER_KEY} client threads: {len(outs)} requests in {wall:.2f} s "
          f"= {len(outs) / wall:.0f} req/s; served {len(ok)} ({sum(o.stream for o in ok)} streams, "
          f"{sum(not o.stream for o in ok)} JSON)")
    for s, n in sorted(statuses.items()):
        print(f"[load {label}]   {s}: {n}")
    for i, a in enumerate(accts):
        charged, _, client_max, redis_max, limited = figures[a.account_id]
        keys_spent = ", ".join(f"{money.fmt(x)}/{money.fmt(lim)}" for x, lim in limited)
        print(f"[load {label}]   account {i}: charged {money.fmt(charged)} of {money.fmt(a.initial)} toman; "
              f"limited keys spent {keys_spent}; open streams at most {redis_max} (Redis samples), "
              f"{client_max} (clients)")
    lat = sorted(o.t_end - o.t_sent for o in ok if not o.stream)
    if lat:
        print(f"[load {label}]   JSON 200 latency p50 {lat[len(lat) // 2] * 1000:.0f} ms, "
              f"max {lat[-1] * 1000:.0f} ms; mock requests in progress at most {sampler.max_mock_active}; "
              f"{sampler.samples} samples")
    r.close()


def _scenario(label: str, url: str, n_nodes: int, mock: MockProcess, tmp_path, seed: int) -> None:
    load_catalog(url)
    accts = seed_accounts(url, ACCOUNTS, balance=BALANCE, rpm=RPM, monthly_limits=MONTHLY_LIMITS)
    nodes = start_gateways(n_nodes, url, mock.base_url, tmp_path, UPGATE_LOG_LEVEL="WARNING")
    try:
        with Sampler(url, [a.account_id for a in accts], mock) as sampler:
            tally, wall = _run_load(nodes, accts, seed)
        assert not sampler.errors, sampler.errors[:3]
        assert wall < TIME_BOUND_S
        _check(label, url, nodes, accts, tally, wall, sampler)
    finally:
        for g in nodes:
            if g.proc.poll() is None:
                g.kill()


@pytest.mark.slow
def test_nodes_on_one_redis_keep_every_limit_and_every_toman(redis_url, mock_proc, tmp_path):
    _scenario("single Redis", redis_url, 3, mock_proc, tmp_path, seed=1)


@pytest.mark.slow
@pytest.mark.cluster
def test_nodes_on_redis_cluster_keep_every_limit_and_every_toman(cluster_url, mock_proc, tmp_path):
    _scenario("Redis Cluster", cluster_url, 3, mock_proc, tmp_path, seed=2)
