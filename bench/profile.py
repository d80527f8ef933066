"""Profile the gateway's hot path: the saturation phase (closed loop, non-streaming, full
billing) with `py-spy record` attached to the gateway process, summarised into
bench/PROFILE.md (self time and inclusive time of the top functions).

Run: `python -m bench --profile` (py-spy must be installed: `pip install py-spy`).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOP = 25


def run(quick: bool = False, pin: bool = True, accounts: int = 400, seconds: float | None = None,
        concurrency: int = 64) -> int:
    from bench import loadgen as lg
    from bench import report
    from bench.harness import Stack
    from bench.phases import HOST, Bench, Plan

    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    seconds = seconds or (5.0 if quick else 15.0)
    with Stack(accounts=accounts, pin=pin) as stack:
        b = Bench(stack, Plan.quick() if quick else Plan())
        b.run(lg.sequential(HOST, stack.gateway_port, b.json_gw, len(b.json_gw)))  # warm every key
        raw = stack.dir / "pyspy.txt"
        spy = subprocess.Popen([pyspy, "record", "--pid", str(stack.gateway_pid), "--rate", "250",
                                "--format", "raw", "--function", "--threads", "--nonblocking", "--duration",
                                str(int(seconds)), "--output", str(raw)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # let py-spy attach before the load starts
        if spy.poll() is not None:
            print(f"py-spy could not attach: {spy.stderr.read().decode(errors='replace')}", file=sys.stderr)
            return 2
        t = b.run(lg.closed_loop(HOST, stack.gateway_port, b.json_gw, concurrency, seconds - 1.5))
        try:
            spy.wait(seconds + 30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(5)
        if not raw.exists():
            print(f"py-spy wrote no profile: {spy.stderr.read().decode(errors='replace')}", file=sys.stderr)
            return 2
        stacks = parse(raw.read_text())
        shutil.copy(raw, HERE / "pyspy-last.txt")  # for a closer look; not committed
    rps = round(t.ok / t.elapsed_s)
    text = markdown(stacks, rps, concurrency, seconds, report.versions())
    out = HERE / "PROFILE.md"
    out.write_text(text)
    print(text)
    print(f"wrote {out}")
    return 0


def parse(text: str) -> Counter:
    """py-spy's raw (collapsed) format: `frame;frame;...;leaf count` a line."""
    stacks: Counter = Counter()
    for line in text.splitlines():
        frames, _, count = line.rpartition(" ")
        if frames and count.isdigit():
            stacks[tuple(frames.split(";"))] += int(count)
    return stacks


def _short(frame: str) -> str:
    """py-spy already shortens paths to their import location: keep `name (path)`, drop the line."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({path})" if path else name


def _area(frame: str) -> str:
    """The top-level package a frame's file belongs to (upgate, tornado, asyncio, redis, ...)."""
    if frame.startswith("thread ("):
        return "no Python frame (native code of a thread)"
    if frame.startswith("Runner.run (asyncio/runners.py"):
        return "uvloop (its C event loop: socket I/O, epoll, callbacks)"
    path = frame.partition(" (")[2].rstrip(")").rsplit(":", 1)[0]
    if not path:
        return "other"
    top = path.split("/", 1)[0]
    return top[:-3] if top.endswith(".py") else top


# What a leaf frame's file says about the work it does (first match wins).
AREAS = (
    (("tornado/curl_httpclient", "pycurl", "upgate/upstream/client", "upgate/upstream/curl_pool"), "upstream HTTP (libcurl through tornado and upgate/upstream, pycurl)"),
    (("redis/", "hiredis", "upgate/store", "upgate/ledger", "upgate/script_channel"), "Redis (redis-py, script channel, ledger)"),
    (("logging/", "upgate/metrics", "prometheus_client", "_monitor"), "access log and metrics"),
    (("upgate/http1", "tornado/http1connection", "tornado/httputil", "tornado/iostream", "tornado/web",
      "tornado/httpserver", "tornado/routing", "tornado/escape", "email/"),
     "HTTP server (upgate/http/connection.py, tornado's web layer)"),
    (("Runner.run (asyncio/runners", "asyncio/", "tornado/platform", "tornado/ioloop",
      "tornado/gen", "tornado/concurrent"), "event loop (uvloop C code, asyncio/tornado glue)"),
    (("upgate/",), "gateway logic (upgate: auth, validation, pricing, handlers)"),
)


def _work(frame: str) -> str:
    for needles, name in AREAS:
        if any(n in frame for n in needles):
            return name
    return "other (stdlib, native threads)"


def markdown(stacks: Counter, rps: int, concurrency: int, seconds: float, versions: dict) -> str:
    total = sum(stacks.values()) or 1
    self_t: Counter = Counter()
    incl: Counter = Counter()
    areas: Counter = Counter()
    work: Counter = Counter()
    threads: Counter = Counter()
    for frames, n in stacks.items():
        threads[frames[0]] += n
        py = list(frames[1:]) or list(frames)
        leaf = "(native code: no Python frame)" if py[-1].startswith("thread (") else _short(py[-1])
        self_t[leaf] += n
        areas[_area(py[-1])] += n
        work[_work(py[-1] if not py[-1].startswith("thread (") else frames[0])] += n
        for f in set(_short(f) for f in py):
            incl[f] += n
    lines = [
        "# Profile of the gateway's hot path",
        "",
        f"`python -m bench --profile`: py-spy (`record --rate 250 --nonblocking --function --threads`) "
        f"attached to one gateway process during a {seconds:.0f} s closed loop of {concurrency} "
        f"connections, non-streaming, full billing; {rps:,} req/s while sampled "
        f"({total:,} samples, idle samples excluded). Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "",
        "Shares are of all non-idle samples of the process (every thread). With uvloop some "
        "callbacks are entered straight from C, so inclusive shares of outer upgate frames are "
        "lower bounds; self time is exact.",
        "",
        "In short: " + "; ".join(f"{a} {n / total:.0%}" for a, n in work.most_common(4)) + ".",
        "",
        "## Where the time goes (self time of the leaf frame, by kind of work)",
        "",
        "| work | share |", "| --- | --- |",
    ]
    lines += [f"| {a} | {n / total:.1%} |" for a, n in work.most_common()]
    lines += ["", "## By top-level package of the leaf frame", "", "| package | share |", "| --- | --- |"]
    lines += [f"| {a} | {n / total:.1%} |" for a, n in areas.most_common(12)]
    lines += ["", f"## Top {TOP} functions by self time", "", "| self | function |", "| --- | --- |"]
    lines += [f"| {n / total:.1%} | `{f}` |" for f, n in self_t.most_common(TOP)]
    lines += ["", f"## Top {TOP} upgate functions by inclusive time (own code and everything it calls)",
              "", "| inclusive | function |", "| --- | --- |"]
    own = [(f, n) for f, n in incl.most_common() if "upgate/" in f][:TOP]
    lines += [f"| {n / total:.1%} | `{f}` |" for f, n in own]
    lines += ["", "## Threads", "", "| samples | thread |", "| --- | --- |"]
    lines += [f"| {n / total:.1%} | {t} |" for t, n in threads.most_common(5) if n / total >= 0.001]
    lines.append("")
    return "\n".join(lines)
