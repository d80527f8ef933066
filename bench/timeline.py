"""`python -m bench --timeline`: where one quiet request's time goes. Starts the usual stack
with the gateway under bench/timeline_boot.py (a timestamp at each step of every request,
taken by wrapping upgate's functions, nothing changed in upgate), sends N sequential
non-streaming requests (concurrency 1, kept alive) and prints the median of each step, then the
added latency at concurrency 1 and at a fixed 50 req/s (open loop), gateway against the mock
called directly, measured first on a stack without the wrapper (whose marks add ~10 µs).

Steps (each from the previous mark):
  recv → handler      parse the head, route, authenticate (cached key), read the body
  handler → admit>    parse the JSON body, resolve the model, size the hold
  admit> → admit<     the admit script: one Redis round trip (and its wake-ups)
  admit< → upstream>  choose the route, build the provider's request
  upstream> → headers<  libcurl: send, the provider's answer head (connection kept alive)
  headers< → body<    the rest of the provider's body
  body< → settle>     decode the answer, count the tokens, price it, build the record
  settle> → settle<   the settle script: one Redis round trip
  settle< → written   re-shape the answer, serialize, headers, write it to the socket
  written → done      after the answer: the access log, metrics (delays only the next request)
The client-side latency less (recv → written) is the two loopback hops and the waking of the
gateway's process for the request and of the client's for the answer.
"""
from __future__ import annotations

import os
import statistics
import sys

import orjson

from bench import loadgen as lg
from bench.harness import Stack
from bench.phases import HOST, Bench, Plan, dist_ms

STEPS = ("recv", "handler", "admit>", "admit<", "upstream>", "headers<", "body<", "settle>",
         "settle<", "written", "done")


def _segments(requests: list) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for marks in requests:
        first = {}
        for name, t in marks:
            first.setdefault(name, t)
        if not all(s in first for s in STEPS):
            continue
        for a, b in zip(STEPS, STEPS[1:]):
            out.setdefault(f"{a} → {b}", []).append((first[b] - first[a]) / 1000)
        out.setdefault("recv → written (in the gateway)", []).append((first["written"] - first["recv"]) / 1000)
    return out


def measure(n: int = 2000, log=print) -> dict:
    res: dict = {}
    with Stack(accounts=50, pin=True) as plain:
        b = Bench(plain, Plan.quick(), log)
        b.run(lg.sequential(HOST, plain.mock_port, b.json_direct, 200))
        b.run(lg.sequential(HOST, plain.gateway_port, b.json_gw, 200))
        for name, port, payloads in (("direct", plain.mock_port, b.json_direct),
                                     ("gateway", plain.gateway_port, b.json_gw)):
            t, _lags = b.run(lg.open_loop(HOST, port, payloads, 50, 20))
            res[f"open50_{name}"] = dist_ms(t.latencies_ns)
        res["open50_added_p50_ms"] = round(res["open50_gateway"]["p50"] - res["open50_direct"]["p50"], 3)
        d = b.run(lg.sequential(HOST, plain.mock_port, b.json_direct, n))
        g = b.run(lg.sequential(HOST, plain.gateway_port, b.json_gw, n))
        res["c1_direct"], res["c1_gateway"] = dist_ms(d.latencies_ns), dist_ms(g.latencies_ns)
        res["c1_added_p50_ms"] = round(res["c1_gateway"]["p50"] - res["c1_direct"]["p50"], 3)
    out = f"/tmp/upgate-timeline-{os.getpid()}.json"
    stack = Stack(accounts=50, pin=True, wrap={"gateway": [sys.executable, "-m", "bench.timeline_boot", "--"]},
                  extra_env={"BENCH_TIMELINE_OUT": out})
    with stack:
        b = Bench(stack, Plan.quick(), log)
        b.run(lg.sequential(HOST, stack.gateway_port, b.json_gw, 300))
        t = b.run(lg.sequential(HOST, stack.gateway_port, b.json_gw, n))
        client = dist_ms(t.latencies_ns)
        stack.stop("gateway")
    with open(out, "rb") as f:
        marks = orjson.loads(f.read())[-n:]
    os.unlink(out)
    seg = _segments(marks)
    res["timeline_us"] = {k: round(statistics.median(v), 1) for k, v in seg.items()}
    res["timeline_client_p50_ms"] = client["p50"]
    res["timeline_requests"] = len(next(iter(seg.values()), []))
    return res


def run(n: int = 2000) -> int:
    r = measure(n, log=lambda m: print(f"[bench] {m}", flush=True))
    print(f"\none request at concurrency 1, median of {r['timeline_requests']:,} (µs, each step from the previous):")
    for k, v in r["timeline_us"].items():
        print(f"  {k:<36} {v:>8.1f}")
    inside = r["timeline_us"].get("recv → written (in the gateway)", 0)
    print(f"  client-measured p50 (marked gateway)  {r['timeline_client_p50_ms'] * 1000:>8.1f}"
          f"   (outside the gateway: {r['timeline_client_p50_ms'] * 1000 - inside:.1f})")
    print(f"\nunmarked gateway: concurrency 1 p50 {r['c1_gateway']['p50']} ms, direct {r['c1_direct']['p50']} ms, "
          f"added {r['c1_added_p50_ms']} ms")
    print(f"at 50 req/s (open loop, 20 s): gateway p50 {r['open50_gateway']['p50']} ms, direct "
          f"{r['open50_direct']['p50']} ms, added {r['open50_added_p50_ms']} ms")
    print(orjson.dumps(r).decode())
    return 0
