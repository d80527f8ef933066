"""What operators rely on: the demo, /metrics, graceful shutdown on SIGTERM, and worker processes.
Each runs the real console entry point as a subprocess where the behaviour is about processes."""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway import PEPPER, seed
from tests.procs import free_port, spawn, stop, wait_port
from upgate.store import keyspace

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]


def test_metrics_are_prometheus_text_without_key_material(node, redis_url):
    key, _, _ = seed(redis_url, balance="100000")
    c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
    c.chat.completions.create(model="mock/chat-1", messages=HELLO)
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="nope/none", messages=HELLO)
    httpx.get(node.url + "/some/random/path")
    text = httpx.get(node.url + "/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    reqs = {(s.labels["route"], s.labels["status"], s.labels["code"]): s.value
            for s in families["upgate_requests"].samples if s.name == "upgate_requests_total"}
    assert reqs[("/v1/chat/completions", "200", "")] == 1
    assert reqs[("/v1/chat/completions", "404", "model_not_found")] == 1
    assert ("unmatched", "404", "not_found") in reqs  # unknown paths never become labels
    assert "upgate_overhead_seconds" in families and "upgate_upstream_seconds" in families
    holds = {s.labels["outcome"]: s.value for s in families["upgate_holds"].samples if s.name.endswith("_total")}
    assert holds == {"placed": 1.0, "settled": 1.0}
    assert "upgate_open_streams" in families
    assert "sk-up" not in text and key[-8:] not in text


class AccessLog:
    """Collects a node's access-log lines: stands in for its stdout (written by the log's own
    writer thread, every 0.1 s)."""

    def __init__(self, node):
        self.log = node.ctx.access_log
        self.lines: list[dict] = []

    def write(self, data: bytes) -> None:
        self.lines.extend(json.loads(line) for line in data.splitlines())

    def flush(self) -> None:
        pass

    def __enter__(self):
        self.log._out, self._was = self, self.log._out
        return self

    def __exit__(self, *exc):
        self.log._out = self._was

    def wait(self, n: int, timeout: float = 5.0) -> list[dict]:
        deadline = time.time() + timeout
        while len(self.lines) < n and time.time() < deadline:
            time.sleep(0.01)
        return self.lines


def test_access_log_names_the_key_on_svc_routes(node, redis_url):
    key, account_id, _ = seed(redis_url, balance="100000")
    h = {"Authorization": f"Bearer {key}"}
    with AccessLog(node) as log:
        assert httpx.get(node.base + "/svc/me", headers=h).status_code == 200
        assert httpx.get(node.base + "/svc/usage?group_by=model", headers=h).status_code == 200
        assert httpx.get(node.base + "/svc/usage?group_by=nope", headers=h).status_code == 400
        lines = log.wait(3)
    assert [(x["route"], x["status"]) for x in lines] == [
        ("/v1/svc/me", 200), ("/v1/svc/usage", 200), ("/v1/svc/usage", 400)]
    for x in lines:
        assert x["account"] == account_id
        assert x["key"] and key.startswith(x["key"]) and x["key"] != key


def scrape(node_url: str, headers: dict | None = None) -> dict:
    """{(sample name, frozenset(labels)): value} of one /metrics scrape."""
    text = httpx.get(node_url + "/metrics", headers=headers or {}).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def sample(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_cooldowns_and_upstream_errors_per_candidate(node, redis_url):
    key, _, _ = seed(redis_url, balance="100000")
    c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
    for _ in range(3):  # the third upstream 429 in a row turns the model cold
        with pytest.raises(openai.RateLimitError):
            c.chat.completions.create(model="mock/chat-big", messages=HELLO, extra_body={"mock": {"status": 429}})
    # dead/chat cannot be reached, the fallback answers: the failure is dead's, not "-"
    assert c.chat.completions.create(model="dead/chat", messages=HELLO,
                                     extra_body={"models": ["mock/chat-1"]}).model == "mock/chat-1"
    with pytest.raises(openai.InternalServerError):
        c.chat.completions.create(model="mock/chat-1", messages=HELLO, extra_body={"mock": {"status": 500}})
    with pytest.raises(openai.RateLimitError):  # cold: refused by the gateway, no provider involved
        c.chat.completions.create(model="mock/chat-big", messages=HELLO)
    m = scrape(node.url)
    assert sample(m, "upgate_cooldowns_total", model="mock/chat-big") == 1
    assert sample(m, "upgate_upstream_errors_total", provider="mock", code="upstream_rate_limited") == 3
    assert sample(m, "upgate_upstream_errors_total", provider="dead", code="upstream_unavailable") == 1
    assert sample(m, "upgate_upstream_errors_total", provider="mock", code="upstream_error") == 1
    assert not [k for k in m if k[0] == "upgate_upstream_errors_total" and ("provider", "-") in k[1]]
    # every attempt's wait is booked under its provider, failed ones included
    assert sample(m, "upgate_upstream_seconds_count", provider="dead") == 1
    assert sample(m, "upgate_upstream_seconds_count", provider="mock") == 5  # 3 × 429, 500, the fallback


def test_metrics_count_reaped_holds(make_node, redis_url):
    from upgate.store import connection as store
    from upgate.billing.ledger import Ledger

    node = make_node(lease_s=1.0)
    key, account_id, key_id = seed(redis_url, balance="100000")

    async def orphan():  # a hold whose node never renews it (as if that node had crashed)
        client = store.connect_async(redis_url)
        try:
            await Ledger(client, node.settings).admit(account_id=account_id, key_id=key_id, model="mock/chat-1",
                                                      hold_micro=1_000_000, stream=True, free=False)
        finally:
            await client.aclose()

    asyncio.run(orphan())
    assert _wallet(redis_url, account_id)[1] == 1_000_000
    deadline = time.time() + 10
    while sample(scrape(node.url), "upgate_holds_total", outcome="reaped") < 1 and time.time() < deadline:
        time.sleep(0.1)
    assert sample(scrape(node.url), "upgate_holds_total", outcome="reaped") == 1
    assert _wallet(redis_url, account_id) == (100_000_000_000, 0)


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_upstream_time_of_failed_and_cut_attempts_is_not_gateway_overhead(make_node, redis_url):
    node = make_node(upstream_silence_s=0.6)
    key, _, _ = seed(redis_url, balance="100000")
    c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
    with AccessLog(node) as log:
        with pytest.raises(openai.InternalServerError) as e:  # 504: 0.6 s of silence
            c.chat.completions.create(model="mock/chat-1", messages=HELLO, extra_body={"mock": {"latency_ms": 3000}})
        assert e.value.status_code == 504
        with pytest.raises(openai.APIError):  # a stream cut after 3 chunks, 0.2 s apart
            for _ in c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True,
                                               extra_body={"mock": {"chunks": 9, "cut_after": 3,
                                                                    "chunk_delay_ms": 200}}):
                pass
        lines = log.wait(2)
    timeout, cut = lines
    assert timeout["status"] == 504 and timeout["upstream_ms"] >= 550 and timeout["overhead_ms"] < 200
    assert cut["stream"] and cut["upstream_ms"] >= 350 and cut["overhead_ms"] < 200
    m = scrape(node.url)
    assert sample(m, "upgate_upstream_seconds_count", provider="mock") == 2
    assert sample(m, "upgate_upstream_seconds_sum", provider="mock") >= 0.9


def test_metrics_token(make_node):
    node = make_node(metrics_token="s3cret", metrics_public=False)
    assert httpx.get(node.url + "/metrics").status_code == 401
    assert httpx.get(node.url + "/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(node.url + "/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_metrics_are_closed_by_default(make_node):
    """No token configured and not opened: /metrics answers 401 to everyone (issue 21)."""
    node = make_node(metrics_public=False)
    assert httpx.get(node.url + "/metrics").status_code == 401
    assert httpx.get(node.url + "/metrics", headers={"Authorization": "Bearer upa_x"}).status_code == 401


def _read_banner(proc, timeout=30) -> dict:
    found, deadline = {}, time.time() + timeout
    while time.time() < deadline and len(found) < 2:
        line = proc.stdout.readline()
        if not line:
            break
        if m := re.search(r"base URL\s+(\S+)", line):
            found["base"] = m.group(1)
        if m := re.search(r"API key\s+(sk-up-\S+)", line):
            found["key"] = m.group(1)
    return found


def test_demo_runs_end_to_end_with_the_openai_client(tmp_path):
    """Run from an empty folder, so the checkout cannot shadow the installed package: the Lua
    scripts and the demo catalog must come from the package data (CI installs non-editable)."""
    port = free_port()
    proc = spawn([sys.executable, "-m", "upgate.cli", "demo", "--port", str(port)],
                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        info = _read_banner(proc)
        assert info.get("key", "").startswith("sk-up-") and info["base"] == f"http://127.0.0.1:{port}/v1"
        c = openai.OpenAI(base_url=info["base"], api_key=info["key"], max_retries=0)
        assert c.chat.completions.create(model="mock/chat-1", messages=HELLO).choices[0].message.content
        text = "".join(ch.choices[0].delta.content or "" for ch in
                       c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True) if ch.choices)
        assert text.startswith("tok0")
        assert c.embeddings.create(model="mock/embed-1", input="x").data
        assert c.chat.completions.create(model="mock/chat-1:free", messages=HELLO).choices
        assert {m.id for m in c.models.list()} == {"mock/chat-1", "mock/chat-1:free", "mock/embed-1",
                                                       "mock/claude-1"}
    finally:
        assert stop(proc, signal.SIGINT) == 0


def _serve(redis_url, mock, tmp_path, *args, **env):
    providers = tmp_path / "providers.toml"
    providers.write_text(f'[providers.mock]\nbase_url = "{mock.base_url}"\ndialect = "openai"\n'
                         '[providers.dead]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')
    port = free_port()
    proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--port", str(port), *args],
                 env={"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER,
                      "UPGATE_PROVIDERS": str(providers), "UPGATE_METRICS_PUBLIC": "1", **env},
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc=proc)
    return proc, f"http://127.0.0.1:{port}/v1"


def _stream_in_thread(base, key, mock_opts, results, i, started=None):
    """A stream in a thread; `started` (a Semaphore) is released at its first chunk, so a test
    signals the node only once every stream is really under way (on a loaded machine a fixed
    sleep can land before the connections are even accepted)."""
    def run():
        c = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
        got = []
        try:
            for ch in c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True,
                                                extra_body={"mock": mock_opts}):
                if ch.choices and ch.choices[0].delta.content:
                    got.append(ch.choices[0].delta.content)
                    if started is not None and len(got) == 1:
                        started.release()
            results[i] = ("done", len(got))
        except openai.APIError as e:
            results[i] = ("cut", len(got), getattr(e, "code", None))
        except Exception as e:  # noqa: BLE001 - recorded for the assertion message
            results[i] = ("error", repr(e))

    t = threading.Thread(target=run)
    t.start()
    return t


def _wallet(redis_url, account_id):
    raw = redis.Redis.from_url(redis_url, decode_responses=True).hgetall(keyspace.wallet(account_id))
    return int(raw["balance"]), int(raw.get("held", 0))


def test_sigterm_lets_short_streams_finish(redis_url, make_node, mock, tmp_path):
    make_node()  # loads the catalog
    key, account_id, _ = seed(redis_url, balance="100000")
    proc, base = _serve(redis_url, mock, tmp_path, UPGATE_SHUTDOWN_GRACE_S="10")
    results = {}
    started = threading.Semaphore(0)
    threads = [_stream_in_thread(base, key, {"chunks": 10, "chunk_delay_ms": 300}, results, i, started)
               for i in range(3)]
    for _ in threads:
        assert started.acquire(timeout=20), results
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(20)
    assert proc.wait(20) == 0
    assert all(r == ("done", 10) for r in results.values()), results
    balance, held = _wallet(redis_url, account_id)
    assert held == 0 and balance == 100_000_000_000 - 3 * (5 * 150_000 + 10 * 600_000)


def test_sigterm_cuts_long_streams_after_the_grace_period_with_partial_settlement(redis_url, make_node, mock, tmp_path):
    make_node()
    key, account_id, _ = seed(redis_url, balance="100000")
    proc, base = _serve(redis_url, mock, tmp_path, UPGATE_SHUTDOWN_GRACE_S="1")
    results = {}
    started = threading.Semaphore(0)
    threads = [_stream_in_thread(base, key, {"chunks": 200, "chunk_delay_ms": 50}, results, i, started)
               for i in range(3)]
    for _ in threads:
        assert started.acquire(timeout=20), results
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(30)
    assert proc.wait(30) == 0
    assert all(r[0] == "cut" and 0 < r[1] < 200 for r in results.values()), results
    balance, held = _wallet(redis_url, account_id)
    full = 3 * (5 * 150_000 + 200 * 600_000)
    assert held == 0 and 0 < 100_000_000_000 - balance < full
    assert redis.Redis.from_url(redis_url).zcard(keyspace.streams(account_id)) == 0


def test_worker_processes_share_one_port(redis_url, make_node, mock, tmp_path):
    make_node()
    key, _, _ = seed(redis_url, balance="100000")
    proc, base = _serve(redis_url, mock, tmp_path, "--processes", "2")
    try:
        deadline = time.time() + 10
        while len(_children(proc.pid)) < 2 and time.time() < deadline:
            time.sleep(0.1)
        assert len(_children(proc.pid)) == 2
        c = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
        for _ in range(6):
            assert c.chat.completions.create(model="mock/chat-1", messages=HELLO).choices
    finally:
        assert stop(proc) == 0
    assert not _children(proc.pid)


def _pids_behind(url: str, want: int = 2, timeout: float = 20) -> set[int]:
    """Worker pids seen on /healthz, one new connection per request (each may land anywhere)."""
    pids: set[int] = set()
    deadline = time.time() + timeout
    while len(pids) < want and time.time() < deadline:
        pids.add(httpx.get(url + "/healthz", headers={"Connection": "close"}).json()["pid"])
    return pids


def test_two_worker_processes_serve_and_scrape_as_one(redis_url, make_node, mock, tmp_path):
    """--processes 2: two workers really answer (two pids), and every scrape of /metrics,
    whichever worker takes it, shows the sum over both once each has published (within a second) (prometheus multiprocess mode in a
    temporary directory that is gone after shutdown)."""
    make_node()
    key, _, _ = seed(redis_url, balance="100000")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc, base = _serve(redis_url, mock, tmp_path, "--processes", "2", TMPDIR=str(scratch))
    url = base[:-len("/v1")]
    try:
        deadline = time.time() + 10
        while len(_children(proc.pid)) < 2 and time.time() < deadline:
            time.sleep(0.1)
        pids = _pids_behind(url)
        assert len(pids) == 2 and pids == set(_children(proc.pid)) and proc.pid not in pids
        n = 8
        for _ in range(n):  # a new client each time: new connections, spread over both workers
            with openai.OpenAI(base_url=base, api_key=key, max_retries=0) as c:
                assert c.chat.completions.create(model="mock/chat-1", messages=HELLO).choices
        # each worker hands its tallies to the shared files once a second (upgate/handlers/metrics.py)
        deadline = time.time() + 5
        while sample(scrape(url, {"Connection": "close"}), "upgate_holds_total", outcome="settled") != n:
            assert time.time() < deadline, "the workers' counts never reached the shared files"
            time.sleep(0.2)
        seen = set()
        for _ in range(12):
            m = scrape(url, {"Connection": "close"})
            seen.add(sample(m, "upgate_requests_total", route="/v1/chat/completions", status="200", code=""))
            assert sample(m, "upgate_holds_total", outcome="settled") == n
            assert sample(m, "upgate_inflight_requests") == 0 and sample(m, "upgate_open_streams") == 0
        assert seen == {n}
        assert [p.name for p in scratch.iterdir()] and all(p.name.startswith("upgate-metrics-") for p in scratch.iterdir())
    finally:
        assert stop(proc) == 0
    assert list(scratch.iterdir()) == []  # the metrics directory went with the server


def test_web_concurrency_sets_the_worker_count(redis_url, make_node, mock, tmp_path):
    make_node()
    proc, base = _serve(redis_url, mock, tmp_path, WEB_CONCURRENCY="2")
    try:
        deadline = time.time() + 10
        while len(_children(proc.pid)) < 2 and time.time() < deadline:
            time.sleep(0.1)
        assert len(_children(proc.pid)) == 2
        assert len(_pids_behind(base[:-len("/v1")])) == 2
    finally:
        assert stop(proc) == 0


def test_healthz_is_liveness_degraded_not_503_while_the_store_is_down(mock, tmp_path):
    from tests.gateway import Node, load_catalog, test_settings
    from tests.procs import RedisServer

    own = RedisServer().start()
    node = None
    try:
        load_catalog(own.url)
        node = Node(test_settings(own.url, journal_path=str(tmp_path / "settle.journal")), {"mock": mock.provider()})
        ok = httpx.get(node.url + "/healthz")
        assert ok.status_code == 200
        body = ok.json()
        assert body["status"] == "ok" and body["down"] == [] and body["redis"] == "ok"
        assert body["catalog"] == "loaded" and body["draining"] is False and body["pid"] == os.getpid()
        assert body["journal"] == {"journaled": 0, "replayed": 0, "pending_bytes": 0}
        own.stop()
        down = httpx.get(node.url + "/healthz", timeout=10)
        assert down.status_code == 200  # a liveness probe must not restart nodes for a store outage
        body = down.json()
        assert body["status"] == "degraded" and body["down"] == ["redis"] and body["redis"] == "unreachable"
        own.start()
        deadline = time.time() + 20
        while httpx.get(node.url + "/healthz").json()["status"] != "ok" and time.time() < deadline:
            time.sleep(0.1)
        assert httpx.get(node.url + "/healthz").json()["status"] == "ok"
    finally:
        if node is not None:
            node.close()
        own.close()


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    out.append(int(entry))
            except OSError:
                continue
    return out


def test_serve_raises_the_open_file_limit_to_the_hard_limit():
    """Two sockets per open stream: a soft limit of 1,024 would cap a node near 500 streams."""
    import subprocess
    import sys

    code = ("import resource as r; soft, hard = r.getrlimit(r.RLIMIT_NOFILE); "
            "r.setrlimit(r.RLIMIT_NOFILE, (256, hard)); "
            "from upgate.server import raise_fd_limit; raise_fd_limit(); "
            "print(r.getrlimit(r.RLIMIT_NOFILE)[0] == (hard if hard != r.RLIM_INFINITY else 1 << 20))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "True", out.stderr
