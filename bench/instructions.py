"""`python -m bench --ab REV --instructions`: count, with valgrind's callgrind, the CPU
instructions the gateway and redis-server execute per request, for git revision REV and for
the working tree. Counts repeat to within about half a percent run after run, where this
VM's timings swing by tens of percent within minutes: a 2% change in the hot path shows here
and nowhere else. Slow (each side runs ~50x slower under valgrind: about a minute a side) and
blind to what only costs time (waiting, the kernel's share): use it beside `--ab`, not instead.

Each side starts a stack (redis-server and the gateway under callgrind, the mock as usual,
nothing pinned), warms every key, zeroes both counters, sends REQUESTS sequential
non-streaming requests, and reads both totals.
"""
from __future__ import annotations

import glob
import shutil
import subprocess
import sys
import time

from bench import loadgen as lg
from bench.ab import checkout, in_tree
from bench.harness import Stack
from bench.phases import HOST, Bench, Plan

REQUESTS = 300


def run(rev: str) -> int:
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    with checkout(rev) as tree:
        rows = {name: _count(path) for name, path in ((rev, tree), ("working tree", None))}
    for name, (gw, rd) in rows.items():
        print(f"{name:>14}: gateway {gw:,.0f} instructions/request; redis-server {rd:,.0f}")
    (g0, r0), (g1, r1) = rows.values()
    print(f"{'ratio':>14}: gateway {g1 / g0:.3f}; redis-server {r1 / r0:.3f}  (working tree / {rev})")
    return 0


def _count(tree: str | None) -> tuple[float, float]:
    out = {}
    with in_tree(tree):
        stack = Stack(accounts=50, pin=False, wrap={
            name: ["valgrind", "--tool=callgrind", "--log-file=/dev/null", "--dump-instr=no",
                   f"--callgrind-out-file={{dir}}/{name}.cg.%p"] for name in ("gateway", "redis")})
        stack.wrap = {n: [a.replace("{dir}", str(stack.dir)) for a in w] for n, w in stack.wrap.items()}
        with stack:
            b = Bench(stack, Plan.quick())
            b.run(lg.sequential(HOST, stack.gateway_port, b.json_gw, 100))  # every key warm
            pids = {"gateway": stack.gateway_pid, "redis": stack.procs["redis"].pid}
            for pid in pids.values():
                subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
            t = b.run(lg.sequential(HOST, stack.gateway_port, b.json_gw, REQUESTS))
            if t.ok != REQUESTS:
                raise RuntimeError(f"{REQUESTS - t.ok} requests failed: {dict(t.statuses)}")
            for name, pid in pids.items():
                before = set(glob.glob(f"{stack.dir}/{name}.cg.*"))
                subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
                out[name] = _summary(stack.dir, name, before) / REQUESTS
    return out["gateway"], out["redis"]


def _summary(folder, name: str, before: set) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for path in set(glob.glob(f"{folder}/{name}.cg.*")) - before:
            for line in open(path):
                if line.startswith("summary:"):
                    return int(line.split()[1])
        time.sleep(0.2)
    raise RuntimeError(f"callgrind wrote no dump for {name}")
