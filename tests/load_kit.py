"""Helpers shared by the fault, fuzz and multi-node suites: Redis state snapshots and the
money invariants, raw HTTP that no client library tidies up, SSE reading, `upgate serve` and
`upgate mock-upstream` subprocesses with their logs captured, and a small threaded load runner.

Everything talks to loopback only. Amounts are integer micro-toman throughout.
"""
from __future__ import annotations

import collections
import http.client
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import httpx
import orjson
import redis

from tests.gateway import PEPPER
from tests.procs import free_port, spawn, stop, wait_port
from upgate.billing import jalali
from upgate.store import keyspace

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]
META = {"X-Svc-Include-Meta": "1"}


def micro(toman: str) -> int:
    return int(Decimal(toman) * 1_000_000)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    """Poll `predicate` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# ---- Redis state ------------------------------------------------------------------------------

def sync_client(url: str):
    """decode_responses client for a single Redis or a cluster URL."""
    if url.startswith("redis+cluster://"):
        return redis.RedisCluster.from_url("redis://" + url[len("redis+cluster://"):], decode_responses=True)
    return redis.Redis.from_url(url, decode_responses=True)


def wallet(r, account_id: str) -> tuple[int, int]:
    raw = r.hgetall(keyspace.wallet(account_id))
    return int(raw.get("balance", 0)), int(raw.get("held", 0))


def spent(r, account_id: str, key_id: str) -> int:
    return int(r.hget(keyspace.key_record(account_id, key_id), "spent:" + jalali.month_key()) or 0)


def usage_cost(r, account_id: str) -> int:
    """Σ cost of every settlement today (settle.lua's own aggregate)."""
    from upgate.services import usage

    return usage.totals(r.hgetall(keyspace.usage(account_id, jalali.day_key())))["cost"]


def snapshot(r, account_id: str, key_id: str) -> dict:
    """Everything a request may change: the wallet, the key record, its rpm window, the holds,
    the stream slots and the free counter of today. Not the refused records' bookkeeping on the
    wallet (`ref_day`, `ref_gone`, lua/_lib.lua keep_record): a refusal leaves a record by design."""
    wallet = {k: v for k, v in r.hgetall(keyspace.wallet(account_id)).items()
              if (k.decode() if isinstance(k, bytes) else k) not in ("ref_day", "ref_gone")}
    return {
        "wallet": wallet,
        "key": r.hgetall(keyspace.key_record(account_id, key_id)),
        "rpm": r.zrange(keyspace.rpm(account_id, key_id), 0, -1, withscores=True),
        "holds": r.zrange(keyspace.holds(account_id), 0, -1),
        "streams": r.zrange(keyspace.streams(account_id), 0, -1),
        "free": r.get(keyspace.free(account_id, jalali.day_key())),
    }


def assert_settled(r, account_id: str, initial: int, charged: int, key_charges: dict | None = None) -> None:
    """The money invariants once nothing is in flight: balance = initial − Σ charges, nothing
    held, no open hold or stream slot, per-key month counters = Σ that key's charges, and the
    usage aggregate agrees."""
    balance, held = wallet(r, account_id)
    assert (balance, held) == (initial - charged, 0), (balance, held, initial, charged)
    assert r.zcard(keyspace.holds(account_id)) == 0
    assert r.zcard(keyspace.streams(account_id)) == 0
    assert usage_cost(r, account_id) == charged
    for key_id, total in (key_charges or {}).items():
        assert spent(r, account_id, key_id) == total, (key_id, spent(r, account_id, key_id), total)
        assert int(r.hget(keyspace.key_record(account_id, key_id), "held") or 0) == 0


# ---- raw HTTP -------------------------------------------------------------------------------------

@dataclass
class Raw:
    status: int | None  # None: the connection closed without an answer
    headers: dict
    body: bytes

    def json(self):
        return orjson.loads(self.body)

    @property
    def code(self) -> str | None:
        try:
            return self.json()["error"]["code"]
        except Exception:  # noqa: BLE001 - not an error body
            return None


def raw_request(port: int, method: str, path: str, headers=(), body: bytes | None = None,
                timeout: float = 30) -> Raw:
    """One request with exactly these headers (a list of pairs: duplicates allowed) and path."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_host=False, skip_accept_encoding=True)
        names = {k.lower() for k, _ in headers}
        for k, v in headers:
            conn.putheader(k, v)
        if body is not None and "content-length" not in names and "transfer-encoding" not in names:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if body is not None:
            conn.send(body)
        resp = conn.getresponse()
        data = resp.read()
        # keep every value of a repeated header name, joined like a proxy would
        hdrs: dict[str, str] = {}
        for k, v in resp.getheaders():
            hdrs[k.lower()] = hdrs[k.lower()] + ", " + v if k.lower() in hdrs else v
        return Raw(resp.status, hdrs, data)
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        return Raw(None, {}, b"")
    finally:
        conn.close()


def raw_bytes(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send bytes as they are (malformed HTTP) and return whatever comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def sse_payloads(text: str) -> list:
    """The decoded `data:` payloads of an SSE body ("[DONE]" stays a string)."""
    out = []
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                data = line[len("data: "):]
                out.append(data if data == "[DONE]" else orjson.loads(data))
    return out


def response_cost(resp: httpx.Response) -> int:
    """What a 200 cost, from X-Svc-Include-Meta's `svc.cost_toman` (JSON or the stream's last
    chunk); 0 when the answer carried none (a cut stream: read the ledger instead)."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        for p in sse_payloads(resp.text):
            if isinstance(p, dict) and "svc" in p:
                return micro(p["svc"]["cost_toman"])
        return 0
    svc = resp.json().get("svc")
    return micro(svc["cost_toman"]) if svc else 0


# ---- subprocesses ---------------------------------------------------------------------------------

PROVIDER_KEY = "sk-mock-PROVIDERSECRET0123456789"  # the operator's provider key (env UPGATE_TEST_MOCK_KEY)


def write_providers(path: Path, mock_base_url: str) -> Path:
    path.write_text(f'[providers.mock]\nbase_url = "{mock_base_url}"\ndialect = "openai"\n'
                    'api_key_env = "UPGATE_TEST_MOCK_KEY"\n'
                    '[providers.dead]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')
    return path


class Gateway:
    """`upgate serve` as a subprocess; stdout (the access log) and stderr go to files."""

    def __init__(self, redis_url: str, mock_base_url: str, workdir: Path, name: str = "gw", *args, **env):
        workdir.mkdir(parents=True, exist_ok=True)
        providers = write_providers(workdir / f"{name}-providers.toml", mock_base_url)
        self.port = free_port()
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--port", str(self.port), *args],
                          env={"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER,
                               "UPGATE_PROVIDERS": str(providers),
                               "UPGATE_JOURNAL": str(workdir / f"{name}.journal"),
                               "UPGATE_TEST_MOCK_KEY": PROVIDER_KEY,
                               **{k: str(v) for k, v in env.items()}},
                          stdout=self._out, stderr=self._err, cwd=str(workdir))
        wait_port(self.port, timeout=30, proc=self.proc)
        self.url = f"http://127.0.0.1:{self.port}"
        self.base = self.url + "/v1"

    def wait_ready(self, timeout: float = 20) -> None:
        def ready():
            try:
                r = httpx.get(self.url + "/healthz", timeout=2)
                return r.status_code == 200 and r.json().get("status") == "ok"  # not merely alive
            except httpx.HTTPError:
                return False
        wait_for(ready, timeout, f"gateway on {self.port} to report healthy")

    def logs(self) -> bytes:
        for f in (self._out, self._err):
            if not f.closed:
                f.flush()
        return self.out_path.read_bytes() + self.err_path.read_bytes()

    def stop(self, sig=None) -> int | None:
        import signal
        code = stop(self.proc, sig or signal.SIGTERM, timeout=30)
        self._out.close()
        self._err.close()
        return code

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._out.close()
        self._err.close()


class MockProcess:
    """`upgate mock-upstream` in its own process (keeps load off the test process's GIL)."""

    def __init__(self):
        self.port = free_port()
        self.proc = spawn([sys.executable, "-m", "upgate.cli", "mock-upstream", "--port", str(self.port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, timeout=30, proc=self.proc)
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.url + "/v1"

    def stats(self) -> dict:
        return httpx.get(self.url + "/_mock/stats", timeout=5).json()

    def reset(self) -> None:
        httpx.post(self.url + "/_mock/reset", content=b"{}", timeout=5)

    def release(self) -> None:
        httpx.post(self.url + "/_mock/release", content=b"{}", timeout=5)

    def close(self) -> None:
        stop(self.proc)


# ---- load -----------------------------------------------------------------------------------------

@dataclass
class Outcome:
    key_id: str
    account_id: str
    status: int
    code: str | None
    cost: int
    retry_after: str | None
    node: int
    stream: bool
    hold: int = 0  # svc.hold_toman of a 200 (micro-toman)
    t_sent: float = 0.0  # time.monotonic() just before the request left
    t_headers: float = 0.0  # the status line and headers are in
    t_end: float = 0.0  # the whole body is in
    complete: bool = True  # a 200 that ended properly (JSON body, or a stream's [DONE])


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, o: Outcome) -> None:
        with self.lock:
            self.outcomes.append(o)

    def counts(self) -> dict:
        c = collections.Counter(f"{o.status} {o.code or 'ok'}" for o in self.outcomes)
        return dict(sorted(c.items()))

    def charged(self, *, account_id: str | None = None, key_id: str | None = None) -> int:
        return sum(o.cost for o in self.outcomes
                   if (account_id is None or o.account_id == account_id)
                   and (key_id is None or o.key_id == key_id))


def chat_once(client: httpx.Client, base: str, key: str, body: dict, stream: bool = False) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", **META}
    body = {**body, "stream": stream}
    if stream:
        with client.stream("POST", base + "/chat/completions", json=body, headers=headers) as resp:
            resp.read()
            return resp
    return client.post(base + "/chat/completions", json=body, headers=headers)


def code_of(resp: httpx.Response) -> str | None:
    if resp.status_code == 200:
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            for p in sse_payloads(resp.text):
                if isinstance(p, dict) and isinstance(p.get("error"), dict):
                    return "sse:" + p["error"]["code"]
        return None
    try:
        return resp.json()["error"]["code"]
    except Exception:  # noqa: BLE001
        return "unparsable"


# ---- multi-node load: nodes, seeded accounts, timed requests, samplers, checks --------------------

def start_gateways(n: int, redis_url: str, mock_base_url: str, workdir: Path, **env) -> list[Gateway]:
    """n `upgate serve` processes on one store, started side by side, each healthy on return."""
    nodes: list[Gateway | None] = [None] * n
    failures: list[BaseException] = []

    def start(i: int) -> None:
        try:
            nodes[i] = Gateway(redis_url, mock_base_url, workdir, f"gw{i}", **env)
            nodes[i].wait_ready(30)
        except BaseException as e:  # noqa: BLE001 - re-raised below, after cleaning up
            failures.append(e)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        for g in nodes:
            if g is not None and g.proc.poll() is None:
                g.kill()
        raise failures[0]
    return nodes  # type: ignore[return-value]


@dataclass
class KeySpec:
    account_id: str
    key_id: str
    key: str
    prefix: str
    rpm: int
    monthly_limit: int | None  # micro-toman


@dataclass
class AccountSpec:
    account_id: str
    initial: int  # micro-toman
    keys: list[KeySpec]


def seed_accounts(redis_url: str, n_accounts: int, *, balance: int, rpm: int,
                  monthly_limits: list[int | None]) -> list[AccountSpec]:
    """n funded accounts with one key per entry of `monthly_limits` (micro-toman, None = no
    limit), every key at `rpm`. Key prefixes are distinct within an account, so the access
    log (which names a key by prefix and account) attributes every line to one key."""
    from upgate.services import accounts, keys
    from upgate.store import connection as store

    client = store.connect_sync(redis_url)
    out = []
    for a in range(n_accounts):
        account_id = accounts.create_account(client, f"0912000{a:04d}", balance)
        specs: list[KeySpec] = []
        for j, limit in enumerate(monthly_limits):
            while True:
                key, key_id, prefix = keys.create_key(client, PEPPER, account_id, name=f"load-{j}",
                                                      monthly_limit_micro=limit, rpm=rpm)
                if prefix not in {s.prefix for s in specs}:
                    break
                keys.revoke_key(client, key_id)  # a 1-in-millions prefix clash: take another
            specs.append(KeySpec(account_id, key_id, key, prefix, rpm, limit))
        out.append(AccountSpec(account_id, balance, specs))
    client.close()
    return out


def timed_chat(client: httpx.Client, base: str, spec: KeySpec, body: dict, *, stream: bool,
               node: int) -> Outcome:
    """One chat completion (with X-Svc-Include-Meta) timed at send, headers and end; a 200's
    cost and hold come from its `svc` object. Transport errors propagate."""
    headers = {"Authorization": f"Bearer {spec.key}", **META}
    payload = {**body, "stream": stream}
    t_sent = time.monotonic()
    with client.stream("POST", base + "/chat/completions", json=payload, headers=headers) as resp:
        t_headers = time.monotonic()
        data = resp.read()
        t_end = time.monotonic()
    status = resp.status_code
    cost = hold = 0
    code: str | None = None
    complete = True
    if status == 200 and resp.headers.get("content-type", "").startswith("text/event-stream"):
        payloads = sse_payloads(data.decode())
        complete = bool(payloads) and payloads[-1] == "[DONE]"
        for p in payloads:
            if isinstance(p, dict):
                if isinstance(p.get("error"), dict):
                    code = "sse:" + str(p["error"].get("code"))
                if "svc" in p:
                    cost, hold = micro(p["svc"]["cost_toman"]), micro(p["svc"]["hold_toman"])
    elif status == 200:
        svc = orjson.loads(data).get("svc") or {}
        if svc:
            cost, hold = micro(svc["cost_toman"]), micro(svc["hold_toman"])
        else:
            complete = False
    else:
        try:
            code = orjson.loads(data)["error"]["code"]
        except Exception:  # noqa: BLE001 - reported as such
            code = "unparsable"
    return Outcome(spec.key_id, spec.account_id, status, code, cost, resp.headers.get("Retry-After"),
                   node, stream, hold, t_sent, t_headers, t_end, complete)


class Sampler:
    """A thread polling, every `interval` s until stopped, each account's open stream slots
    (ZCARD of `{a:<acct>}:streams`) and, if given, the mock's requests in progress; keeps the
    largest values seen."""

    def __init__(self, url: str, account_ids: list[str], mock: "MockProcess | None" = None,
                 interval: float = 0.01):
        self.client = sync_client(url)
        self.account_ids = account_ids
        self.mock = mock
        self.interval = interval
        self.max_slots = {a: 0 for a in account_ids}
        self.max_mock_active = 0
        self.samples = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _run(self) -> None:
        http = httpx.Client(timeout=5)
        while not self._stop.is_set():
            try:
                for a in self.account_ids:
                    n = self.client.zcard(keyspace.streams(a))
                    self.max_slots[a] = max(self.max_slots[a], n)
                if self.mock is not None:
                    active = http.get(self.mock.url + "/_mock/stats").json()["active"]
                    self.max_mock_active = max(self.max_mock_active, active)
                self.samples += 1
            except Exception as e:  # noqa: BLE001 - surfaced by the test
                self.errors.append(repr(e))
            self._stop.wait(self.interval)
        http.close()

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that share one instant. An interval ending where another starts does
    not overlap it (ends are processed first), so the count never overstates."""
    events = sorted([(b, -1) for a, b in intervals if b > a] + [(a, 1) for a, b in intervals if b > a])
    best = cur = 0
    for _, step in events:
        cur += step
        best = max(best, cur)
    return best


def max_in_window(times_ms: list[float], width_ms: float = 60_000) -> int:
    """The most entries in any window (t − width, t] — admit.lua's sliding rpm window."""
    times = sorted(times_ms)
    best = lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - width_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def access_log(gateway: Gateway) -> list[dict]:
    """The JSON access-log lines a (stopped) gateway wrote on stdout."""
    out = []
    for line in gateway.out_path.read_bytes().splitlines():
        if line.startswith(b"{"):
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(doc, dict) and "route" in doc:
                out.append(doc)
    return out
