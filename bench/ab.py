"""`python -m bench --ab REV`: the gateway of git revision REV against the working tree's, both
running at once and measured in short alternating bursts. On a VM whose speed swings 2-3x
within minutes, two runs a minute apart cannot tell a 10% change from the weather; bursts
a second apart can, and each round's ratio (working tree / REV) compares like with like.

Both stacks (redis-server, mock, gateway; pinned as in the full run, both gateways on the
same CPU) start side by side, REV's from a temporary git worktree that its processes start
in. Each round runs, per side and in ABBA order: concurrency 1 (p50, gateway CPU per request
and Redis's own time in the script calls, from INFO commandstats), a closed loop of 64 connections (req/s and gateway CPU per request) and 300 paced
streams (gateway CPU per relayed event). Prints each round, then the medians and the median
of the per-round ratios.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import loadgen as lg
from bench.harness import Stack, cpu_seconds
from bench.phases import HOST, Bench, Plan, dist_ms

ROOT = Path(__file__).resolve().parent.parent
SEQUENTIAL = 500
SATURATION_S = 2.0
STREAMS, STREAM_CHUNKS = 300, 60  # at the plan's 20 ms pace: 15,000 events/s, no overload
# (key, label, higher is better)
FIGURES = (("c1_p50_ms", "c1 p50 ms", False), ("c1_us", "c1 CPU µs/req", False),
           ("c1_store_us", "c1 store µs/req", False),
           ("rps", "64-conn req/s", True), ("sat_us", "64-conn CPU µs/req", False),
           ("event_us", "stream CPU µs/event", False))


def run(rev: str, rounds: int, pin: bool, accounts: int) -> int:
    rounds = max(rounds, 6)  # fewer alternations than this cannot average the weather out
    with checkout(rev) as tree, contextlib.ExitStack() as stacks:
        sides = {rev: tree, "working tree": None}
        # both built before either starts: a started stack pins this process to the other CPUs,
        # and a stack built then would see one CPU and pin nothing
        built = {name: Stack(accounts=accounts, pin=pin) for name in sides}
        benches = {}
        for name, path in sides.items():
            with in_tree(path):
                stacks.enter_context(built[name])
            b = benches[name] = Bench(built[name], Plan.quick())
            b.run(lg.sequential(HOST, b.s.gateway_port, b.json_gw, len(b.json_gw)))  # every key warm
        rows: dict[str, list[dict]] = {name: [] for name in sides}
        for n in range(rounds):
            # ABBA: within a round, the side that always ran second would get the later machine
            order = list(sides) if n % 2 == 0 else list(sides)[::-1]
            for name in order:
                rows[name].append(row := _measure(benches[name]))
                print(f"round {n + 1:>2} {name:>14}: " + _fmt(row), flush=True)
        print("\nmedians")
        for name, rs in rows.items():
            print(f"{name:>14}: " + _fmt({k: statistics.median(r[k] for r in rs) for k in rs[0]}))
        old, new = rows[rev], rows["working tree"]
        print(f"\nworking tree / {rev}, median of the {rounds} per-round ratios (range):")
        for k, label, higher in FIGURES:
            ratios = sorted(b[k] / a[k] for a, b in zip(old, new) if a[k])
            worse = sum(1 for r in ratios if (r < 1) == higher and r != 1)
            print(f"  {label:>20}: {statistics.median(ratios):.3f} ({ratios[0]:.3f}–{ratios[-1]:.3f}); "
                  f"worse in {worse} of {len(ratios)} rounds")
    return 0


@contextlib.contextmanager
def checkout(rev: str):
    """REV in a temporary git worktree (its path), removed afterwards."""
    if any("__editable__" in type(f).__name__ or "__editable__" in str(f) for f in sys.meta_path):
        # REV's processes would load the editable checkout's lua/ scripts through its finder
        # (an older upgate looks for `upgate.lua` as a package): a comparison of nothing
        sys.exit("upgate is installed in editable mode (pip install -e): REV's gateway would run "
                 "this checkout's Lua scripts. `pip uninstall upgate` first.")
    with tempfile.TemporaryDirectory(prefix="upgate-ab-") as tmp:
        tree = Path(tmp) / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
        try:
            yield str(tree)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


@contextlib.contextmanager
def in_tree(tree: str | None):
    """Processes started inside run `tree`'s code (None: the working tree's). The stack's
    children run `python -m upgate.cli`, which puts their working directory first on sys.path
    (ahead of PYTHONPATH and of an installed upgate): that decides whose code they run."""
    saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.chdir(tree or ROOT)
    if tree:
        os.environ["PYTHONPATH"] = tree
    else:
        os.environ.pop("PYTHONPATH", None)
    try:
        yield
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _measure(b: Bench) -> dict:
    port, payloads, pid = b.s.gateway_port, b.json_gw, b.s.gateway_pid
    store = b.s.redis_client()
    store.config_resetstat()
    c0 = cpu_seconds(pid)
    seq = b.run(lg.sequential(HOST, port, payloads, SEQUENTIAL))
    c1 = cpu_seconds(pid)
    # the store's own time on this request's script calls (admit + settle), as Redis counts it
    calls = store.info("commandstats")
    store_us = sum(v["usec"] for k, v in calls.items() if k in ("cmdstat_evalsha", "cmdstat_fcall")) / SEQUENTIAL
    others = {n: b.s.procs[n].pid for n in ("redis", "mock")}
    o1 = {n: cpu_seconds(p) for n, p in others.items()}
    sat = b.run(lg.closed_loop(HOST, port, payloads, 64, SATURATION_S))
    c2 = cpu_seconds(pid)
    o2 = {n: cpu_seconds(p) for n, p in others.items()}
    gw, _ = b.stream_payloads(STREAM_CHUNKS, b.plan.stream_pace_ms)
    st = b.run(lg.streams(HOST, port, gw, STREAMS, 1.0, 60))
    c3 = cpu_seconds(pid)
    return {"c1_p50_ms": dist_ms(seq.latencies_ns)["p50"], "c1_us": 1e6 * (c1 - c0) / SEQUENTIAL,
            "c1_store_us": store_us,
            "rps": sat.ok / sat.elapsed_s, "sat_us": 1e6 * (c2 - c1) / max(sat.ok, 1),
            "event_us": 1e6 * (c3 - c2) / max(sum(st.events), 1),
            **{f"{n}_us": 1e6 * (o2[n] - o1[n]) / max(sat.ok, 1) for n in others}}


def _fmt(r: dict) -> str:
    return (f"c1: p50 {r['c1_p50_ms']:.3f} ms, {r['c1_us']:,.0f} µs CPU/req, "
            f"{r['c1_store_us']:.1f} µs in store scripts; "
            f"64 conns: {r['rps']:,.0f} req/s, {r['sat_us']:,.0f} µs CPU/req; "
            f"{STREAMS} streams: {r['event_us']:.1f} µs CPU/event"
            + (f"; redis {r['redis_us']:.0f}, mock {r['mock_us']:.0f} µs/req" if "redis_us" in r else ""))
