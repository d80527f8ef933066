"""`python -m bench.agent_routes`: what the agents' routes add to a request, beside the chat
route's, on one stack (bench/harness.py: redis-server, the mock provider and one gateway
process with UPGATE_RESPONSES=on). The same prompt, the same five-chunk answer, one connection
per route, concurrency 1, the routes interleaved request by request so the machine's swings fall
on all of them alike; p50 and p90 of the wall time per route, and the p50's excess over chat's.
The mock's own time is measured too (chat straight to it), so the gateway's part shows. Then
the gateway process's CPU per request of each route (blocks of 50, the routes in turn, the
median of the rounds): what a busy machine's wall times cannot show."""
from __future__ import annotations

import argparse
import statistics
import time

import httpx
import orjson

from bench.harness import MODEL, Stack, cpu_seconds

PROMPT = "Say something short about gateways, please."


def _requests(key: str) -> dict:
    auth = {"Authorization": f"Bearer {key}"}  # (each round another key: keys have an rpm)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 256}
    return {
        "chat": ("/v1/chat/completions", auth, chat),
        "chat stream": ("/v1/chat/completions", auth, {**chat, "stream": True}),
        "messages": ("/v1/messages", {**auth, "anthropic-version": "2023-06-01"}, chat),
        "messages stream": ("/v1/messages", {**auth, "anthropic-version": "2023-06-01"}, {**chat, "stream": True}),
        "responses": ("/v1/responses", auth, {"model": MODEL, "input": PROMPT, "max_output_tokens": 256}),
        "responses stream": ("/v1/responses", auth, {"model": MODEL, "input": PROMPT, "max_output_tokens": 256,
                                                     "stream": True}),
    }


def run(count: int, pin: bool) -> int:
    with Stack(accounts=200, pin=pin, extra_env={"UPGATE_RESPONSES": "on"}) as s:
        reqs = _requests(s.keys[0].key)
        clients = {name: httpx.Client(base_url=f"http://127.0.0.1:{s.gateway_port}", timeout=30) for name in reqs}
        direct = httpx.Client(base_url=f"http://127.0.0.1:{s.mock_port}", timeout=30)
        times: dict[str, list[float]] = {name: [] for name in [*reqs, "mock direct"]}
        for i in range(count + 50):  # the first 50 rounds warm up
            reqs = _requests(s.keys[i % len(s.keys)].key)
            for name, (path, headers, body) in reqs.items():
                t = time.perf_counter()
                r = clients[name].post(path, headers=headers, content=orjson.dumps(body))
                r.read()
                if r.status_code != 200:
                    raise SystemExit(f"{name}: {r.status_code} {r.text[:300]}")
                if i >= 50:
                    times[name].append(time.perf_counter() - t)
            t = time.perf_counter()
            direct.post("/v1/chat/completions", content=orjson.dumps({**reqs["chat"][2], "model": "mock-bench-1"})).read()
            if i >= 50:
                times["mock direct"].append(time.perf_counter() - t)
        base = {"json": statistics.median(times["chat"]), "stream": statistics.median(times["chat stream"])}
        print(f"{count} requests a route, concurrency 1, interleaved ({s.placement})")
        print(f"{'route':<18} {'p50 ms':>8} {'p90 ms':>8} {'p50 − chat µs':>14}")
        for name, values in times.items():
            values.sort()
            p50, p90 = statistics.median(values), values[int(len(values) * 0.9)]
            same = base["stream" if "stream" in name else "json"]
            extra = "" if name == "mock direct" else f"{(p50 - same) * 1e6:>14.0f}"
            print(f"{name:<18} {p50 * 1000:>8.3f} {p90 * 1000:>8.3f} {extra}")
        cpu: dict[str, list[float]] = {name: [] for name in reqs}
        for rnd in range(max(6, count // 50)):
            for name in reqs:
                before = cpu_seconds(s.gateway_pid)
                for j in range(50):
                    path, headers, body = _requests(s.keys[(rnd * 50 + j) % len(s.keys)].key)[name]
                    clients[name].post(path, headers=headers, content=orjson.dumps(body)).read()
                cpu[name].append((cpu_seconds(s.gateway_pid) - before) / 50)
        print(f"\ngateway CPU per request, median of {len(cpu['chat'])} rounds of 50 (range)")
        for name, values in cpu.items():
            values.sort()
            same = statistics.median(cpu["chat stream" if "stream" in name else "chat"])
            med = statistics.median(values)
            print(f"{name:<18} {med * 1e6:>8.0f} µs ({values[0] * 1e6:.0f}–{values[-1] * 1e6:.0f}); "
                  f"{med / same:.3f} × chat's")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_routes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500, help="requests a route (default 500)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    args = parser.parse_args()
    return run(args.count, not args.no_pin)


if __name__ == "__main__":
    raise SystemExit(main())
