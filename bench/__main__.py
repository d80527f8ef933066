"""`python -m bench [--quick]`: measure one gateway process against the mock provider and
write BENCHMARKS.md at the repo root. `python -m bench --profile` runs the saturation
phase under py-spy instead and writes bench/PROFILE.md. `python -m bench --ab REV` runs
git revision REV and the working tree side by side and compares them; with
`--instructions`, by instructions counted under valgrind. `python -m bench --failover` measures
a model of two routes with its first route dead (bench/failover.py).
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_STREAMS = 2000  # the target for concurrent streams at a 20 ms pace


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a ~70 s run with smaller counts")
    ap.add_argument("--profile", action="store_true",
                    help="profile the saturation phase with py-spy → bench/PROFILE.md")
    ap.add_argument("--ab", metavar="REV",
                    help="compare git revision REV with the working tree, run alternately")
    ap.add_argument("--failover", action="store_true",
                    help="concurrency-1 latency of a model of two routes, healthy and with its first route dead")
    ap.add_argument("--records", type=int, nargs="?", const=100_000, metavar="N",
                    help="Redis memory per request record: N records (default 100,000) through settle")
    ap.add_argument("--timeline", action="store_true",
                    help="where one quiet request's time goes (concurrency 1), and the added p50 at 50 req/s")
    ap.add_argument("--instructions", action="store_true",
                    help="with --ab: count instructions per request under valgrind instead of timing")
    ap.add_argument("--rounds", type=int, default=10, help="alternations of --ab (default 10, at least 6)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    ap.add_argument("--accounts", type=int, default=400,
                    help="funded accounts, one key each (default 400; at least 200 for 2,000 streams)")
    ap.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md",
                    help="where to write the report (default: BENCHMARKS.md at the repo root)")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="abort the run after this long (default 10, quick 3)")
    args = ap.parse_args(argv)
    limit_s = int((args.max_minutes or (3 if args.quick else 10)) * 60)
    signal.signal(signal.SIGALRM, _timed_out)
    signal.alarm(limit_s)  # a hard bound on the whole run; the stack is torn down on the way out
    try:
        if args.ab:
            if args.instructions:
                from bench import instructions

                return instructions.run(args.ab)
            from bench import ab

            return ab.run(args.ab, args.rounds, pin=not args.no_pin, accounts=args.accounts)
        if args.timeline:
            from bench import timeline

            return timeline.run()
        if args.records:
            from bench import records

            return records.run(args.records)
        if args.failover:
            from bench import failover

            return failover.run(pin=not args.no_pin, accounts=args.accounts)
        if args.profile:
            from bench import profile

            return profile.run(quick=args.quick, pin=not args.no_pin, accounts=args.accounts)
        return run(args)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e or 'Ctrl-C'}); every child process was stopped", file=sys.stderr)
        return 130
    finally:
        signal.alarm(0)


def run(args) -> int:
    from bench import report
    from bench.harness import KEY_RPM, Stack
    from bench.phases import Bench, Plan

    plan = Plan.quick() if args.quick else Plan()
    most = max(*plan.ramp, plan.hold_streams, plan.memory_streams)
    if args.accounts * 10 < most:  # an account may hold 10 open streams
        print(f"--accounts must be at least {-(-most // 10)} for {most} concurrent streams", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    results: dict = {"started": report.stamp(), "quick": args.quick, "accounts": args.accounts,
                     "key_rpm": KEY_RPM, "machine": report.machine(), "versions": report.versions(),
                     "python_speed_krounds_s": report.python_speed()}
    log("starting redis-server, the mock provider and the gateway; seeding "
        f"{args.accounts} accounts")
    with Stack(accounts=args.accounts, pin=not args.no_pin) as stack:
        results["placement"] = stack.placement
        log(f"placement: {stack.placement}")
        b = Bench(stack, plan, log)
        results["background_cores_at_start"] = bg = b.background_load()
        if bg > 0.2:
            log(f"warning: other work is using {bg:.2f} cores of this machine; figures will be noisy")
        cpu0, wall0 = b.cpu(), time.monotonic()
        results["rss_idle_start"] = b.rss()
        results["latency"] = b.latency()
        results["commands"] = b.commands()
        results["streaming"] = b.stream_latency()
        results["memory"] = b.memory()  # before the ramp, whose 2,000 streams raise the peak
        results["throughput"] = b.throughput()
        results["ramp"] = b.ramp()
        results["hold"] = b.hold()
        time.sleep(1)
        results["rss_idle_end"] = b.rss()
        wall = time.monotonic() - wall0
        results["cpu_cores_used_over_run"] = {k: round((v - cpu0[k]) / wall, 2) for k, v in b.cpu().items()}
        gw = stack.procs.get("gateway")
        results["gateway_alive"] = gw is not None and gw.poll() is None
        results["gateway_log_tail"] = [line for line in stack.tail("gateway", 400).splitlines()
                                       if "WARNING" in line or "ERROR" in line or "Traceback" in line][-20:]
    results["duration_s"] = round(time.monotonic() - t0, 1)
    results["notes"] = notes(results, plan)
    args.output.write_text(report.markdown(results))
    print("\n" + report.summary(results))
    print(f"\nwrote {args.output} ({results['duration_s']:.0f} s)")
    return 0


def notes(r: dict, plan) -> list[str]:
    """Plain-language caveats that follow from what was measured."""
    out = []
    bg = r.get("background_cores_at_start", 0)
    if bg > 0.2:
        out.append(f"The machine was not quiet: other work used {bg:.2f} cores while the benchmark "
                   "idled at the start.")
    other = [x["cpu_util"].get("other", 0) for x in r.get("throughput", {}).get("closed", {}).values()]
    if other and max(other) > 0.15:
        out.append(f"Other work on the machine (processes outside the benchmark, and the kernel) "
                   f"used up to {max(other):.2f} cores during the saturation phase: the gateway "
                   "competed for its core, so its throughput here is a lower bound.")
    st = r.get("streaming", {})
    fresh, reused = st.get("added_ttfb_fresh_ms"), st.get("added_ttfb_reused_ms")
    if fresh and reused and reused["p50"] - fresh["p50"] > 10:
        out.append(f"Streams on a kept-alive client connection (what the openai SDK's pool does) get "
                   f"their first event {reused['p50'] - fresh['p50']:.0f} ms later than on a new one: "
                   "the signature of a Nagle / delayed-ACK stall: upgate/http/connection.py sets TCP_NODELAY "
                   "on every accepted connection, in the gateway and in the mock.")
    ramp = r.get("ramp", {})
    for n, lv in ramp.get("levels", {}).items():
        g, d = lv.get("gateway"), lv["direct"]
        if d["stalled_streams"] or d["ok"] < d["n"]:
            out.append(f"At {n:,} streams the mock itself (direct, same client) already stalls "
                       f"({d['stalled_streams']} streams with a gap, {d['late_first_byte']} late first "
                       f"bytes, {d['events_per_s']:,} events/s): on this machine the mock and the load "
                       "generator share one core, so no gateway can be measured at this level here.")
        if g and g["ok"] < g["n"]:
            out.append(f"At {n} streams {g['n'] - g['ok']} gateway streams did not complete: "
                       f"{g['check']}.")
    if ramp:
        out.append(f"The ramp's streams send {plan.ramp_chunks} chunks {plan.stream_pace_ms} ms apart "
                   f"(not 20) so that all of them are open at once: they start over "
                   f"{plan.ramp_start_over_s:.0f} s and last {plan.ramp_chunks * plan.stream_pace_ms / 1000:.0f} s. "
                   f"N streams at a {plan.stream_pace_ms} ms pace are N × {1000 // plan.stream_pace_ms} "
                   "events per second through one Python process.")
    out.extend(_stream_cpu(ramp, plan))
    hold = r.get("hold")
    if hold and hold["peak_flowing"] < 0.9 * hold["n"]:
        out.append(f"In the hold phase {hold['n']:,} streams were requested but at most "
                   f"{hold['peak_flowing']:,} received events at once, and the first byte took "
                   f"{hold['ttfb_ms']['p90'] / 1000:.1f} s at p90.")
    log_tail = r.get("gateway_log_tail") or []
    if any("MaxConnectionsError" in line or "No connection available" in line for line in log_tail):
        out.append("Some requests found no free Redis connection in time (the gateway's pool holds "
                   "1,024 and waits 5 s for one): they were answered 503 or, for settlements, went "
                   "to the local journal and were replayed later.")
    if log_tail:
        out.append("The gateway logged warnings or errors during the run (last lines in the raw "
                   "numbers, `gateway_log_tail`).")
    if not r.get("gateway_alive", True):
        out.append("The gateway process had exited by the end of the run.")
    return out


def _stream_cpu(ramp: dict, plan) -> list[str]:
    """The gateway's CPU per relayed event at each ramp level, and what its kernel share alone
    says of the target's event rate."""
    cpu = {n: lv["gateway"].get("cpu_us_per_event", {}).get("gateway")
           for n, lv in ramp.get("levels", {}).items() if "gateway" in lv}
    cpu = {n: c for n, c in cpu.items() if c}
    if not cpu:
        return []
    rate = TARGET_STREAMS * 1000 // plan.stream_pace_ms
    least = min(cpu, key=lambda n: cpu[n]["kernel"])
    kernel = cpu[least]["kernel"]
    levels = "; ".join(f"{n:,} streams: {c['user']} µs user + {c['kernel']} µs kernel" for n, c in cpu.items())
    return [f"The gateway's CPU per relayed event in the ramp ({levels}). {TARGET_STREAMS:,} streams at a "
            f"{plan.stream_pace_ms} ms pace are {rate:,} events/s; at the least kernel time per event "
            f"measured ({kernel} µs, at {least:,} streams: a read from the provider's socket and a write "
            f"to the client's, on loopback TCP) that is {rate * kernel / 1e6:.2f} cores of kernel time "
            "alone, and one process's event loop runs on one core."]


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _timed_out(signum, frame) -> None:
    raise KeyboardInterrupt("the run exceeded its time limit")


if __name__ == "__main__":
    sys.exit(main())
