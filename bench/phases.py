"""The measurements: each phase drives the gateway and, with the same client and the same
requests, the mock provider directly, and returns plain numbers (ms, req/s, kB, counts).

Each phase runs its own event loop (uvloop) in this process; `Plan` holds every count and
duration, so `--quick` is just a smaller plan.
"""
from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import dataclass

import orjson

from bench import loadgen as lg
from bench.harness import MODEL, Monitor, Stack, cpu_seconds, cpu_split, machine_busy_seconds, rss_kb

HOST = "127.0.0.1"
PATH = "/v1/chat/completions"
PROMPT = [{"role": "user", "content": "Say hello in one short sentence, please."}]
STALL_FACTOR = 10  # a gap over 10x the mock's pace is a stall
IDLE_WINDOW_S = 6.0  # long enough to see one tick of the gateway's 5 s reaper


@dataclass
class Plan:
    warmup: int = 300
    latency_requests: int = 2000  # each, gateway and direct, at concurrency 1
    latency_blocks: int = 4  # alternate direct / gateway blocks so drift hits both alike
    commands_batch: int = 1000
    commands_streams: int = 100
    saturation_s: float = 10.0
    saturation_concurrency: tuple[int, ...] = (32, 64)
    direct_saturation_s: float = 5.0
    open_rate: float = 200.0
    open_s: float = 10.0
    stream_chunks: int = 20
    stream_pace_ms: int = 20
    stream_conns: int = 20  # keep-alive connections for TTFB / gap, started over 1 s,
    stream_per_conn: int = 6  # each running this many streams one after another
    ramp: tuple[int, ...] = (250, 500, 750, 1000, 1500, 2000)
    ramp_chunks: int = 150  # 3 s at 20 ms: every stream is still open when the last starts
    ramp_start_over_s: float = 2.0
    hold_streams: int = 2000  # the same count at a slow pace: what one process can hold
    hold_pace_ms: int = 500
    hold_chunks: int = 12
    memory_streams: int = 1000
    memory_pace_ms: int = 250
    memory_chunks: int = 30

    @classmethod
    def quick(cls) -> "Plan":
        return cls(warmup=200, latency_requests=500, latency_blocks=2, commands_batch=300,
                   commands_streams=50, saturation_s=5.0, saturation_concurrency=(64,),
                   direct_saturation_s=3.0, open_s=4.0, stream_conns=10,
                   stream_per_conn=4, ramp=(250, 500), ramp_chunks=100,
                   ramp_start_over_s=1.0, hold_streams=1000, hold_chunks=6, memory_chunks=20)


def pct(values, p: float) -> float:
    """Nearest-rank percentile of unsorted values (0 when empty)."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s), max(1, math.ceil(p / 100 * len(s)))) - 1]


def ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def dist_ms(values_ns) -> dict:
    return {"n": len(values_ns), "p50": ms(pct(values_ns, 50)), "p90": ms(pct(values_ns, 90)),
            "p99": ms(pct(values_ns, 99)), "max": ms(max(values_ns) if values_ns else 0)}


class Bench:
    def __init__(self, stack: Stack, plan: Plan, log=print):
        self.s, self.plan, self.log = stack, plan, log
        keys = [a.key for a in stack.keys]
        self.gw_port, self.mock_port = stack.gateway_port, stack.mock_port
        self.json_gw = [lg.build_request(PATH, self._body(MODEL), k) for k in keys]
        self.json_direct = [lg.build_request(PATH, self._body("mock-bench-1"), k) for k in keys]

    # -- requests
    @staticmethod
    def _body(model: str, stream: bool = False, chunks: int = 5, pace_ms: int = 0,
              direct: bool = False) -> bytes:
        body = {"model": model, "messages": PROMPT, "max_tokens": 1024,
                "mock": {"chunks": chunks, "chunk_delay_ms": pace_ms}}
        if stream:
            body["stream"] = True
            if direct:  # what the gateway's openai dialect adds on its way upstream
                body["stream_options"] = {"include_usage": True}
        return orjson.dumps(body)

    def stream_payloads(self, chunks: int, pace_ms: int) -> tuple[list[bytes], list[bytes]]:
        keys = [a.key for a in self.s.keys]
        gw = [lg.build_request(PATH, self._body(MODEL, True, chunks, pace_ms), k) for k in keys]
        direct = [lg.build_request(PATH, self._body("mock-bench-1", True, chunks, pace_ms, True), k)
                  for k in keys]
        return gw, direct

    @staticmethod
    def run(coro):
        import uvloop

        return uvloop.run(coro)

    def check(self, what: str, tally) -> dict:
        """Counts of a tally; logs anything that was not a 200."""
        bad = {k: v for k, v in tally.statuses.items() if k != 200}
        info = {"ok": tally.ok, "other_statuses": bad, "errors": dict(tally.errors)}
        if bad or tally.errors:
            self.log(f"  ! {what}: {info}; first: {tally.sample_error}")
            info["sample_error"] = tally.sample_error
        return info

    # -- 1. added latency at concurrency 1
    def latency(self) -> dict:
        p = self.plan
        self.log(f"latency: {p.warmup} warm-up + {p.latency_requests} requests each, concurrency 1")
        self.run(lg.sequential(HOST, self.mock_port, self.json_direct, p.warmup))
        warm = self.run(lg.sequential(HOST, self.gw_port, self.json_gw, max(p.warmup, len(self.json_gw))))
        self.check("gateway warm-up", warm)
        per = p.latency_requests // p.latency_blocks
        direct, gateway = lg.Tally(), lg.Tally()
        for b in range(p.latency_blocks):
            for tally, port, payloads in ((direct, self.mock_port, self.json_direct),
                                          (gateway, self.gw_port, self.json_gw)):
                t = self.run(lg.sequential(HOST, port, payloads[b * per % len(payloads):] + payloads, per))
                tally.latencies_ns += t.latencies_ns
                for k, v in t.statuses.items():
                    tally.statuses[k] = tally.statuses.get(k, 0) + v
                for k, v in t.errors.items():
                    tally.errors[k] = tally.errors.get(k, 0) + v
                tally.sample_error = tally.sample_error or t.sample_error
        d, g = dist_ms(direct.latencies_ns), dist_ms(gateway.latencies_ns)
        added = {q: round(g[q] - d[q], 3) for q in ("p50", "p90", "p99")}
        return {"direct_ms": d, "gateway_ms": g, "added_ms": added,
                "direct_check": self.check("direct", direct),
                "gateway_check": self.check("gateway", gateway)}

    # -- 5. Redis commands per request
    def commands(self) -> dict:
        p = self.plan
        n = p.commands_batch
        self.log(f"redis commands: {IDLE_WINDOW_S:.0f} s idle, then {n} non-streaming and "
                 f"{p.commands_streams} streaming requests")
        self.run(_count_loop(self.gw_port, self.json_gw, 8, 200))  # grow the pools to 8 first
        # the gateway's background traffic (reaper every 5 s, catalog poll) as a rate
        with Monitor(self.s.redis_port) as idle:
            time.sleep(IDLE_WINDOW_S)
        rate = {k: v / IDLE_WINDOW_S for k, v in idle.counts.items()}
        out = {"background_per_s": {k: round(v, 3) for k, v in rate.items()}}
        gw, _ = self.stream_payloads(5, 0)
        batches = (("json", lambda: self.run(_count_loop(self.gw_port, self.json_gw, 8, n))),
                   ("stream", lambda: self.run(lg.streams(HOST, self.gw_port, gw, p.commands_streams, 1.0, 30))))
        for name, batch in batches:
            t0 = time.monotonic()
            before = self.s.commandstats()
            with Monitor(self.s.redis_port) as mon:
                tally = batch()
            after = self.s.commandstats()
            out[name] = _per_request(before, after, mon, rate, tally.ok, time.monotonic() - t0)
            out[name]["check"] = self.check(f"commands batch ({name})", tally)
        return out

    # -- 2. throughput and latency under load
    def throughput(self) -> dict:
        p = self.plan
        out = {"closed": {}}
        self.log(f"direct saturation: 64 connections, {p.direct_saturation_s:.0f} s")
        t = self.run(lg.closed_loop(HOST, self.mock_port, self.json_direct, 64, p.direct_saturation_s))
        out["direct_closed_64"] = {"rps": round(t.ok / t.elapsed_s), **dist_ms(t.latencies_ns),
                                   "check": self.check("direct saturation", t)}
        for c in p.saturation_concurrency:
            self.log(f"gateway saturation: {c} connections, {p.saturation_s:.0f} s, full billing")
            cpu0 = self.cpu()
            w0 = time.monotonic()
            t = self.run(lg.closed_loop(HOST, self.gw_port, self.json_gw, c, p.saturation_s))
            cpu = {k: v - cpu0[k] for k, v in self.cpu().items()}
            wall = time.monotonic() - w0
            out["closed"][c] = {
                "rps": round(t.ok / t.elapsed_s), **dist_ms(t.latencies_ns),
                "cpu_util": {k: round(v / wall, 2) for k, v in cpu.items()},
                "cpu_us_per_request": {k: round(v / max(1, t.ok) * 1e6) for k, v in cpu.items()},
                "check": self.check(f"gateway saturation c={c}", t)}
        self.log(f"open loop: {p.open_rate:.0f} req/s for {p.open_s:.0f} s, direct then gateway")
        for name, port, payloads in (("direct", self.mock_port, self.json_direct),
                                     ("gateway", self.gw_port, self.json_gw)):
            t, lags = self.run(lg.open_loop(HOST, port, payloads, p.open_rate, p.open_s))
            out[f"open_{name}"] = {"achieved_rps": round(t.ok / p.open_s, 1), **dist_ms(t.latencies_ns),
                                   "send_lag_p99_ms": ms(pct(lags, 99)),
                                   "check": self.check(f"open loop {name}", t)}
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each of our processes, and by everything else."""
        procs = {"gateway": self.s.gateway_pid, "mock": self.s.procs["mock"].pid,
                 "redis": self.s.procs["redis"].pid}
        ours = {**{k: cpu_seconds(pid) for k, pid in procs.items()}, "loadgen": sum(os.times()[:2])}
        # everything else the machine ran meanwhile (other jobs, kernel): the noise floor
        ours["other"] = machine_busy_seconds() - sum(ours.values())
        return ours

    def cpu_split(self) -> dict[str, tuple[float, float]]:
        """(user, kernel) CPU seconds so far of the processes a stream passes through."""
        return {"gateway": cpu_split(self.s.gateway_pid), "mock": cpu_split(self.s.procs["mock"].pid),
                "loadgen": tuple(os.times()[:2])}

    # -- 3. streaming: TTFB, gaps, concurrent streams
    def stream_latency(self) -> dict:
        p = self.plan
        self.log(f"streaming: {p.stream_conns} keep-alive connections x {p.stream_per_conn} streams "
                 f"of {p.stream_chunks} chunks {p.stream_pace_ms} ms apart")
        gw, direct = self.stream_payloads(p.stream_chunks, p.stream_pace_ms)
        out = {}
        for name, port, payloads in (("direct", self.mock_port, direct), ("gateway", self.gw_port, gw)):
            st = self.run(lg.streams(HOST, port, payloads, p.stream_conns, 1.0, 60,
                                     per_conn=p.stream_per_conn))
            out[name] = self._stream_summary(st, p.stream_pace_ms)
            out[name]["ttfb_fresh_ms"] = dist_ms(st.ttfb_fresh_ns)
            out[name]["check"] = self.check(f"streams {name}", st)
        g, d = out["gateway"], out["direct"]
        out["added_ttfb_ms"] = {q: round(g["ttfb_ms"][q] - d["ttfb_ms"][q], 3) for q in ("p50", "p99")}
        out["gap_p99_over_direct_ms"] = round(g["gap_ms"]["p99"] - d["gap_ms"]["p99"], 3)
        out["steady_gap_p99_over_direct_ms"] = round(g["gap_steady_ms"]["p99"] - d["gap_steady_ms"]["p99"], 3)
        for kind in ("fresh", "reused"):
            if g.get(f"ttfb_{kind}_ms") and d.get(f"ttfb_{kind}_ms"):
                out[f"added_ttfb_{kind}_ms"] = {
                    q: round(g[f"ttfb_{kind}_ms"][q] - d[f"ttfb_{kind}_ms"][q], 3) for q in ("p50", "p99")}
        return out

    def ramp(self) -> dict:
        """Each level through the mock directly, then through the gateway. Once the gateway
        stalls, the levels above it go on directly only, until the mock and the load generator
        stall by themselves: how far this machine can measure any gateway."""
        p = self.plan
        gw, direct = self.stream_payloads(p.ramp_chunks, p.stream_pace_ms)
        out = {"levels": {}, "pace_ms": p.stream_pace_ms, "chunks": p.ramp_chunks}
        sides = [("direct", self.mock_port, direct), ("gateway", self.gw_port, gw)]
        for n in p.ramp:
            level = out["levels"][n] = {}
            for name, port, payloads in sides:
                self.log(f"stream ramp: {n} concurrent streams, {name}, "
                         f"{p.ramp_chunks} chunks {p.stream_pace_ms} ms apart")
                before = self.cpu_split()
                st = self.run(lg.streams(HOST, port, payloads, n, p.ramp_start_over_s, 60))
                level[name] = self._stream_summary(st, p.stream_pace_ms)
                level[name]["cpu_us_per_event"] = _per_event(before, self.cpu_split(), sum(st.events))
                level[name]["check"] = self.check(f"ramp {n} {name}", st)
            if not _no_stall(level["direct"], n, first_byte=False):
                self.log("  the mock and the load generator stall by themselves at this level")
                break
            if "gateway" in level and not _no_stall(level["gateway"], n, first_byte=False):
                self.log("  the gateway stalls at this level: higher levels go on directly only")
                sides = sides[:1]
            time.sleep(1)
        levels = out["levels"].items()
        out["max_without_stall"] = max(  # no gap stall and no late first byte
            (n for n, lv in levels if "gateway" in lv and _no_stall(lv["gateway"], n)), default=0)
        out["max_without_gap_stall"] = max(  # the definition: no gap over 10x the pace
            (n for n, lv in levels if "gateway" in lv and _no_stall(lv["gateway"], n, first_byte=False)),
            default=0)
        out["direct_max_without_gap_stall"] = max(
            (n for n, lv in levels if _no_stall(lv["direct"], n, first_byte=False)), default=0)
        return out

    def hold(self) -> dict:
        """The stream count of the ramp's top level at a slow pace: can one process hold it?"""
        p = self.plan
        self.log(f"stream hold: {p.hold_streams} streams, {p.hold_chunks} chunks {p.hold_pace_ms} ms apart")
        gw, _ = self.stream_payloads(p.hold_chunks, p.hold_pace_ms)
        st = self.run(lg.streams(HOST, self.gw_port, gw, p.hold_streams, p.ramp_start_over_s, 60))
        out = self._stream_summary(st, p.hold_pace_ms)
        out["check"] = self.check("hold", st)
        return out

    def _stream_summary(self, st, pace_ms: int) -> dict:
        limit = STALL_FACTOR * pace_ms * 1e6
        return {"n": st.n, "ok": st.ok, "peak_open": st.peak_open, "peak_flowing": st.peak_flowing,
                "late_first_byte": sum(1 for t in st.ttfb_ns if t > limit),
                "ttfb_ms": dist_ms(st.ttfb_ns), "gap_ms": dist_ms(st.gaps_ns),
                "gap_steady_ms": dist_ms(st.gaps_steady_ns),
                **({"ttfb_reused_ms": dist_ms(st.ttfb_reused_ns), "gap_reused_ms": dist_ms(st.gaps_reused_ns)}
                   if st.ttfb_reused_ns else {}),
                "stalled_streams": sum(1 for g in st.max_gap_ns if g > limit),
                "stall_threshold_ms": STALL_FACTOR * pace_ms,
                "events_per_s": round(sum(st.events) / st.elapsed_s) if st.elapsed_s else 0,
                "elapsed_s": round(st.elapsed_s, 2)}

    def background_load(self, seconds: float = 2.0) -> float:
        """Cores busy outside the benchmark's processes while it idles (other jobs, kernel)."""
        a = self.cpu()
        time.sleep(seconds)
        b = self.cpu()
        return round((b["other"] - a["other"]) / seconds, 2)

    # -- 4. memory
    def rss(self) -> dict:
        return rss_kb(self.s.gateway_pid)

    def memory(self) -> dict:
        p = self.plan
        self.log(f"memory: {p.memory_streams} open streams ({p.memory_chunks} chunks "
                 f"{p.memory_pace_ms} ms apart) over {len(self.s.keys)} accounts")
        gw, _ = self.stream_payloads(p.memory_chunks, p.memory_pace_ms)
        samples: list[int] = []
        pid = self.s.gateway_pid

        async def sample() -> None:
            for _ in range(8):  # a few samples while every stream is open
                samples.append(rss_kb(pid)["VmRSS"])
                await asyncio.sleep(0.25)

        st = self.run(lg.streams(HOST, self.gw_port, gw, p.memory_streams, p.ramp_start_over_s, 60,
                                 while_open=sample))
        out = {"streams": p.memory_streams, "ok": st.ok, "peak_open": st.peak_open,
               "peak_flowing": st.peak_flowing,
               "rss_kb_while_open": max(samples) if samples else None,
               "samples_kb": samples, "after": self.rss(), "check": self.check("memory", st)}
        return out


async def _count_loop(port: int, payloads: list[bytes], concurrency: int, total: int) -> lg.Tally:
    """Exactly `total` requests over `concurrency` connections (the command-count batch)."""
    tally = lg.Tally()
    conns = await lg.connect_many(HOST, port, concurrency)
    left = total

    async def worker(conn, i) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            try:
                tally.add(await asyncio.wait_for(conn.request(payloads[i % len(payloads)]), 10))
            except (asyncio.TimeoutError, ConnectionError, lg.ProtocolError) as e:
                tally.fail(e)
                return
            i += concurrency

    try:
        await asyncio.wait_for(asyncio.gather(*(worker(c, i) for i, c in enumerate(conns))), 120)
    finally:
        lg.close_all(conns)
    return tally


def _per_request(before: dict, after: dict, mon: Monitor, background: dict, n: int,
                 window: float) -> dict:
    """Commands per request: what clients sent (MONITOR, minus the background rate over the
    batch's window), and commandstats' view, which also counts the commands run inside the
    Lua scripts."""
    n = max(1, n)
    stats = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    for k in ("info", "monitor", "config|resetstat"):
        stats.pop(k, None)
    stats = {k: v for k, v in stats.items() if v}
    client = {k: (v - background.get(k, 0) * window) / n for k, v in mon.counts.items() if k != "info"}
    client = {k: round(v, 3) for k, v in client.items() if round(v, 3) > 0}
    return {"requests": n, "window_s": round(window, 2),
            "client_commands_per_request": client,
            "client_commands_total_per_request": round(sum(client.values()), 3),
            "script_calls_per_request": round(sum(stats.get(c, 0) for c in ("fcall", "evalsha", "eval")) / n, 3),
            "commandstats_per_request": {k: round(v / n, 3) for k, v in sorted(stats.items())},
            "in_script_per_request": {k: round(v / n, 3) for k, v in sorted(mon.in_scripts.items())}}


def _per_event(before: dict, after: dict, events: int) -> dict:
    """Microseconds of user and kernel CPU per event, by process (left out when idle)."""
    out: dict = {}
    if not events:
        return out
    for name, (user0, sys0) in before.items():
        user, kernel = (1e6 * (a - b) / events for a, b in zip(after[name], (user0, sys0)))
        if user + kernel >= 0.5:
            out[name] = {"user": round(user, 1), "kernel": round(kernel, 1)}
    return out


def _no_stall(level: dict, n: int, first_byte: bool = True) -> bool:
    """Every stream completed, none had a gap over the threshold and, with `first_byte`,
    none waited longer than that for its first event."""
    return level["ok"] == n and level["stalled_streams"] == 0 and not (first_byte and level["late_first_byte"])
