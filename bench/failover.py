"""`python -m bench --failover`: what a model of two routes costs at concurrency 1, next to the
same model with one route (docs/routes.md, docs/performance.md):

- one route: the bench's model (`mock/bench-1`), as every other figure measures it;
- two healthy routes (`mock/bench-two`): the route choice on the hot path, and what a model
  costs once its dead route is cold (a cold route is skipped exactly so);
- a dead first route (`mock/bench-dead`): its priority-0 route is a port nothing listens on,
  so every request is refused there, writes its failure (one script call) and fails over.
  UPGATE_ROUTE_FAILURES is set out of reach, so the route never cools: every request pays
  the failover, the figure an operator sees for the first few requests after a route dies.

Each model is measured in alternating blocks (like `latency`), on one stack.
"""
from __future__ import annotations

import statistics

from bench import loadgen as lg
from bench.harness import Stack, cpu_seconds
from bench.phases import HOST, PATH, Bench, Plan, dist_ms

EXTRA_PROVIDERS = """
[providers.dead]
base_url = "http://127.0.0.1:9/v1"
dialect = "openai"
"""
_PRICES = 'prompt_toman_per_million = "150000"\ncompletion_toman_per_million = "600000"\n'
EXTRA_CATALOG = f"""
[[models]]
id = "mock/bench-two"
routes = [{{ provider = "mock", upstream_model = "mock-bench-1" }}, {{ provider = "mock", upstream_model = "mock-bench-1b" }}]
{_PRICES}
[[models]]
id = "mock/bench-dead"
routes = [{{ provider = "dead", upstream_model = "x", priority = 0 }}, {{ provider = "mock", upstream_model = "mock-bench-1", priority = 1 }}]
{_PRICES}"""
MODELS = ("mock/bench-1", "mock/bench-two", "mock/bench-dead")
BLOCKS, PER_BLOCK = 20, 100


def run(pin: bool, accounts: int) -> int:
    with Stack(accounts=min(accounts, 50), pin=pin, extra_providers=EXTRA_PROVIDERS,
               extra_catalog=EXTRA_CATALOG, extra_env={"UPGATE_ROUTE_FAILURES": "1000000000"}) as s:
        b = Bench(s, Plan.quick())
        keys = [a.key for a in s.keys]
        payloads = {m: [lg.build_request(PATH, b._body(m), k) for k in keys] for m in MODELS}
        for m in MODELS:  # warm every key and connection
            b.check(f"{m} warm-up", b.run(lg.sequential(HOST, s.gateway_port, payloads[m], len(keys))))
        lat: dict[str, list[int]] = {m: [] for m in MODELS}
        cpu: dict[str, list[float]] = {m: [] for m in MODELS}  # gateway CPU µs/request, per block
        pid = s.gateway_pid
        for n in range(BLOCKS):
            for m in (MODELS if n % 2 == 0 else MODELS[::-1]):
                before = cpu_seconds(pid)
                t = b.run(lg.sequential(HOST, s.gateway_port, payloads[m], PER_BLOCK))
                cpu[m].append((cpu_seconds(pid) - before) / PER_BLOCK * 1e6)
                b.check(m, t)
                lat[m] += t.latencies_ns
        base = dist_ms(lat[MODELS[0]])
        base_cpu = statistics.median(cpu[MODELS[0]])
        print(f"\nconcurrency 1, {BLOCKS * PER_BLOCK} requests per model (ms; gateway CPU µs/request, "
              "median of the blocks)")
        for m in MODELS:
            d, c = dist_ms(lat[m]), statistics.median(cpu[m])
            print(f"  {m:>16}: p50 {d['p50']:.3f}  p90 {d['p90']:.3f}  p99 {d['p99']:.3f}  "
                  f"(p50 {d['p50'] - base['p50']:+.3f} vs one route); CPU {c:,.0f} µs ({c - base_cpu:+,.0f})")
    return 0
