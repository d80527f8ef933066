"""`python -m bench --records [N]`: what request records cost Redis. Starts a private
redis-server, seeds 200 funded accounts, and writes N records (default 100,000) through the
real settle path (Ledger.admit + Ledger.settle, so settle.lua's keep_record), 32 at a time,
with realistic fields; then drops what is not a record (the rpm windows, the usage hashes)
and reads INFO memory's used_memory against the seeded store. Prints bytes per record, MiB per
million, and how that splits between the records lists and the request index."""
from __future__ import annotations

import asyncio
import os
import random
import secrets
import time

ACCOUNTS = 200
MODELS = [("openai/gpt-4o-mini", "openai"), ("anthropic/claude-sonnet-4", "anthropic"),
          ("google/gemini-2.5-flash", "google"), ("openai/gpt-4.1", "openai")]


def _record(rid: str, key_id: str, prefix: str, model: str, provider: str, hold: int, rng) -> dict:
    from upgate.billing import request_record

    prompt, completion = rng.randint(40, 4000), rng.randint(5, 900)
    return request_record.new(
        request_id=rid, key_id=key_id, key_prefix=prefix, model=model, answered_model=model,
        provider=provider, stream=rng.random() < 0.6, status=200, prompt_tokens=prompt,
        completion_tokens=completion, cached_tokens=rng.choice([0, 0, 0, prompt // 2]),
        hold_micro=hold, cost_micro=rng.randint(1_000, hold), ttfb_ms=rng.randint(150, 1200),
        duration_ms=rng.randint(400, 12_000))


async def _write(url: str, keys: list[tuple[str, str, str]], n: int) -> None:
    from upgate.billing.ledger import Ledger
    from upgate.settings import Settings
    from upgate.store import connection as store

    client = store.connect_async(url)
    ledger = Ledger(client, Settings(topup_url="https://pay.example/topup", lease_s=60.0))
    rng = random.Random(41)
    todo = iter(range(n))

    async def worker():
        for i in todo:
            acct, kid, prefix = keys[i % len(keys)]
            model, provider = MODELS[i % len(MODELS)]
            hold = rng.randint(20_000, 5_000_000)
            adm = await ledger.admit(account_id=acct, key_id=kid, model="mock/bench-1", hold_micro=hold,
                                     stream=False, free=False)
            rec = _record("req_" + secrets.token_hex(12), kid, prefix, model, provider, adm.hold_micro, rng)
            await ledger.settle(acct, adm.hold_id, key_id=kid, model="mock/bench-1",
                                cost_micro=rec["cost_micro"], prompt_tokens=rec["prompt_tokens"],
                                completion_tokens=rec["completion_tokens"], record=rec)

    await asyncio.gather(*(worker() for _ in range(32)))
    await client.aclose()


def measure(n: int = 100_000, log=print) -> dict:
    from bench.harness import PEPPER, Stack
    from upgate.billing import money
    from upgate.services import accounts, keys as keys_svc
    from upgate.store import connection as store

    stack = Stack(accounts=0, pin=False)
    stack.redis_port = __import__("bench.harness", fromlist=["free_port"]).free_port()
    try:
        stack._start_redis()
        client = store.connect_sync(stack.redis_url)
        keys = []
        for i in range(ACCOUNTS):
            acct = accounts.create_account(client, f"0912{i:07d}", money.parse_toman("100000000"))
            for _ in range(3):  # 600 rpm a key at most: three keep a fast run under the limit
                _full, kid, prefix = keys_svc.create_key(client, PEPPER, acct, rpm=600)
                keys.append((acct, kid, prefix))
        r = stack.redis
        r.execute_command("FUNCTION", "LIST")
        before = r.info("memory")["used_memory"]
        log(f"writing {n:,} records through admit + settle on a private redis-server")
        t0 = time.monotonic()
        asyncio.run(_write(stack.redis_url, keys, n))
        took = time.monotonic() - t0
        lists = index = 0
        for k in r.scan_iter(count=1000):
            name = k.decode(errors="replace")
            if ":rpm:" in name or ":usage:" in name:
                r.delete(k)
            elif name.endswith("}:rq") or name.endswith("}:reqs"):
                lists += r.memory_usage(k, samples=0)
            elif name.startswith("reqidx:"):
                index += r.memory_usage(k, samples=0)
        after = r.info("memory")["used_memory"]
        per = (after - before) / n
        return {"records": n, "accounts": ACCOUNTS, "seconds": round(took, 1),
                "used_memory_delta": after - before, "bytes_per_record": round(per, 1),
                "mib_per_million": round(per * 1e6 / 2**20, 1),
                "lists_bytes_per_record": round(lists / n, 1), "index_bytes_per_record": round(index / n, 1),
                "redis": r.info("server")["redis_version"]}
    finally:
        stack.close()


def run(n: int) -> int:
    res = measure(n)
    print(f"{res['records']:,} records over {res['accounts']} accounts ({res['seconds']} s, redis "
          f"{res['redis']}): {res['bytes_per_record']} bytes each of used_memory, "
          f"{res['mib_per_million']} MiB per million (MEMORY USAGE: records lists "
          f"{res['lists_bytes_per_record']}, request index {res['index_bytes_per_record']} bytes a record)")
    return 0


if __name__ == "__main__":
    os.sys.exit(run(int(os.environ.get("N", "100000"))))
