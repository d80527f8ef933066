"""`python -m bench --ab REV`: the gateway of git revision REV against the working tree's, run
alternately, so both see the same machine. On a VM whose speed swings 2-3x within hours,
two separate benchmark runs cannot tell a 10% change from the weather; alternating can.

Each round starts a fresh stack per side (redis-server, mock, gateway; pinned as in the full
run) with REV checked out in a temporary git worktree that its processes start in, then
measures concurrency 1 (p50 and gateway CPU per request), a closed loop of 64
connections (req/s and gateway CPU per request) and 300 paced streams (gateway CPU per
relayed event). Prints one line per side and round, then
the medians.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench import loadgen as lg
from bench.harness import Stack, cpu_seconds
from bench.phases import HOST, Bench, Plan, dist_ms

ROOT = Path(__file__).resolve().parent.parent
SEQUENTIAL = 1500
SATURATION_S = 6.0
STREAMS, STREAM_CHUNKS = 300, 100  # at the plan's 20 ms pace: 15,000 events/s, no overload


def run(rev: str, rounds: int, pin: bool, accounts: int) -> int:
    with tempfile.TemporaryDirectory(prefix="upgate-ab-") as tmp:
        tree = Path(tmp) / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
        try:
            sides = {rev: str(tree), "working tree": None}
            rows: dict[str, list[dict]] = {name: [] for name in sides}
            for n in range(rounds):
                # ABBA: on a VM that speeds up or slows down over minutes, the side that always
                # ran second would always get the later machine
                for name, path in (list(sides.items()) if n % 2 == 0 else list(sides.items())[::-1]):
                    rows[name].append(row := _measure(path, pin, accounts))
                    print(f"round {n + 1} {name:>14}: " + _fmt(row), flush=True)
            print("\nmedians")
            for name, rs in rows.items():
                print(f"{name:>14}: " + _fmt({k: statistics.median(r[k] for r in rs) for k in rs[0]}))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    return 0


def _measure(tree: str | None, pin: bool, accounts: int) -> dict:
    # The stack's children run `python -m upgate.cli`, which puts their working directory
    # first on sys.path (ahead of PYTHONPATH and of the editable install): that decides
    # whose code they run.
    saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.chdir(tree or ROOT)
    if tree:
        os.environ["PYTHONPATH"] = tree
    else:
        os.environ.pop("PYTHONPATH", None)
    try:
        with Stack(accounts=accounts, pin=pin) as stack:
            b = Bench(stack, Plan.quick())
            port, payloads = stack.gateway_port, b.json_gw
            b.run(lg.sequential(HOST, port, payloads, len(payloads)))  # every key warm
            c0 = cpu_seconds(stack.gateway_pid)
            seq = b.run(lg.sequential(HOST, port, payloads, SEQUENTIAL))
            c1 = cpu_seconds(stack.gateway_pid)
            sat = b.run(lg.closed_loop(HOST, port, payloads, 64, SATURATION_S))
            c2 = cpu_seconds(stack.gateway_pid)
            gw, _ = b.stream_payloads(STREAM_CHUNKS, b.plan.stream_pace_ms)
            st = b.run(lg.streams(HOST, port, gw, STREAMS, 1.0, 60))
            c3 = cpu_seconds(stack.gateway_pid)
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return {"c1_p50_ms": dist_ms(seq.latencies_ns)["p50"], "c1_us": 1e6 * (c1 - c0) / SEQUENTIAL,
            "rps": sat.ok / sat.elapsed_s, "sat_us": 1e6 * (c2 - c1) / max(sat.ok, 1),
            "event_us": 1e6 * (c3 - c2) / max(sum(st.events), 1)}


def _fmt(r: dict) -> str:
    return (f"concurrency 1: p50 {r['c1_p50_ms']:.3f} ms, {r['c1_us']:,.0f} µs CPU/request; "
            f"64 connections: {r['rps']:,.0f} req/s, {r['sat_us']:,.0f} µs CPU/request; "
            f"{STREAMS} streams: {r['event_us']:.1f} µs CPU/event")
