"""`upgate-admin models sync`: prices from an upstream list in OpenRouter's shape (a file and a
local HTTP server), exact toman for awkward decimals, dry run, refusals, --max-change, and a
running node serving the new prices without a restart."""
from __future__ import annotations

import http.server
import json
import threading
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from upgate.billing import jalali
from upgate.catalog import price_sync, rules as catalog, store as catalog_store
from upgate.store import connection as store

FIXTURE = Path(__file__).parents[1].joinpath("openrouter_models.json")

PROVIDERS = """
[providers.openrouter]
base_url = "http://127.0.0.1:1/api/v1"

[providers.acme]
base_url = "http://127.0.0.1:1/v1"
"""

CATALOG = """
[[models]]
id = "openai/gpt-4o-mini"
provider = "openrouter"
upstream_model = "openai/gpt-4o-mini"
name = "GPT-4o mini"
prompt_toman_per_million = "10000"
completion_toman_per_million = "40000"
context_length = 100000
capabilities = ["chat"]

[[models]]
id = "openai/gone"
provider = "openrouter"
prompt_toman_per_million = "1"
completion_toman_per_million = "2"

[[models]]
id = "acme/chat-1"
provider = "acme"
prompt_toman_per_million = "15000"
completion_toman_per_million = "60000"
"""


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env={"COLUMNS": "200"})


@pytest.fixture
def env(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("UPGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("UPGATE_PROVIDERS", str(tmp_path / "providers.toml"))
    (tmp_path / "providers.toml").write_text(PROVIDERS)
    client = store.connect_sync(redis_url)
    catalog_store.store(client, catalog.parse(CATALOG, {"openrouter", "acme"}))
    return client


def sync_args(source, *extra):
    return ["models", "sync", "--source", str(source), "--provider", "openrouter",
            "--usd-toman", "61500", "--markup", "1.15", *extra]


def models(client) -> dict:
    return {m.id: m for m in catalog_store.read(client)[2]}


def snapshot(client):
    return catalog_store.read(client), catalog_store.read_syncs(client)


# ---- the arithmetic (pure) -------------------------------------------------------------------

def test_toman_is_exact_and_rounded_up_for_awkward_decimals():
    rate, markup = Decimal("1234567.89"), Decimal("1.15")
    # 0.0000001234 × 10^6 × 1234567.89 × 1.15 = 175197.5292699 exactly: up to 175197.529270
    assert price_sync.toman(Decimal("0.0000001234"), rate, markup, True) == Decimal("175197.529270")
    assert price_sync.toman(Decimal("0.0005"), rate, markup, False) == Decimal("709.876537")  # 709.87653675
    assert price_sync.toman(Decimal("0.0000004"), rate, markup, True) == Decimal("567901.229400")
    assert price_sync.toman(Decimal("0"), rate, markup, True) == 0


def test_source_numbers_are_read_as_decimals_not_floats():
    src = price_sync.read_source(b'{"data": [{"id": "a/b", "pricing": {"prompt": 0.0000001234, '
                                 b'"completion": "0.1"}}]}')
    assert src[0].pricing["prompt"] == Decimal("0.0000001234")


# ---- sync from a file ------------------------------------------------------------------------

def test_sync_from_a_file_reprices_adds_and_keeps(env):
    before_version = catalog_store.read(env)[0]
    res = invoke(*sync_args(FIXTURE, "--include", "anthropic/*", "--include", "qwen/*",
                            "--include", "openai/gpt-4o:*", "--json"))
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"version", "changed", "added", "removed", "unchanged"}
    assert int(out["version"]) == int(before_version) + 1
    assert out["changed"] == [{
        "model": "openai/gpt-4o-mini",
        "old_prompt_toman_per_million": "10000.000000", "new_prompt_toman_per_million": "10608.750000",
        "old_completion_toman_per_million": "40000.000000",
        "new_completion_toman_per_million": "42435.000000", "change_pct": "6.09"}]
    assert [a["model"] for a in out["added"]] == ["anthropic/claude-3.5-sonnet", "qwen/qwen-2.5-72b-instruct"]
    assert out["removed"] == [] and out["unchanged"] == 0
    assert "openai/gpt-4o:extended" in res.stderr  # not a catalog id: skipped, said so

    ms = models(env)
    mini = ms["openai/gpt-4o-mini"]
    assert (mini.prompt_toman_per_million, mini.completion_toman_per_million) == \
        (Decimal("10608.75"), Decimal("42435"))
    assert mini.cached_prompt_toman_per_million == Decimal("5304.375")  # input_cache_read
    assert mini.cache_write_toman_per_million is None  # none upstream: the prompt price
    assert mini.web_search_toman == Decimal("707.25")  # per request, not per million
    assert (mini.name, mini.context_length) == ("GPT-4o mini", 100000)  # the operator's own kept

    claude = ms["anthropic/claude-3.5-sonnet"]
    assert claude.upstream_model == "anthropic/claude-3.5-sonnet" and claude.provider == "openrouter"
    assert claude.cache_write_toman_per_million == Decimal("265218.75")  # 3.75 × 61500 × 1.15
    assert (claude.context_length, claude.max_output_tokens) == (200000, 8192)

    qwen = ms["qwen/qwen-2.5-72b-instruct"]  # the id lowercased, the source's id kept upstream
    assert qwen.upstream_model == "Qwen/Qwen-2.5-72B-Instruct"
    assert qwen.prompt_toman_per_million == Decimal("8727.465")  # 0.1234 × 61500 × 1.15
    assert qwen.request_toman == Decimal("35.3625")  # 0.0005 × 61500 × 1.15, per request
    assert qwen.max_output_tokens is None

    assert ms["openai/gone"].prompt_toman_per_million == 1  # not listed, no --prune: kept
    assert ms["acme/chat-1"].prompt_toman_per_million == 15000  # another provider: untouched

    rec = catalog_store.read_syncs(env)["openrouter"]
    assert rec["source"] == str(FIXTURE) and rec["usd_toman"] == "61500" and rec["markup"] == "1.15"
    updated = catalog_store.read(env)[1]  # prices_updated_at
    assert rec["version"] == out["version"] and abs(updated - time.time()) < 60
    assert rec["at"] == jalali.utc_iso(int(updated))  # the same Redis TIME

    again = invoke(*sync_args(FIXTURE, "--include", "anthropic/*", "--include", "qwen/*", "--json"))
    assert again.exit_code == 0
    assert json.loads(again.stdout) == {"version": out["version"], "changed": [], "added": [],
                                        "removed": [], "unchanged": 3}  # nothing to do: no new version


def test_exact_price_of_the_awkward_rate(env, tmp_path):
    res = invoke("models", "sync", "--source", str(FIXTURE), "--provider", "openrouter",
                 "--usd-toman", "1234567.89", "--markup", "1.15", "--include", "qwen/*", "--yes", "--json")
    assert res.exit_code == 0, res.output
    qwen = models(env)["qwen/qwen-2.5-72b-instruct"]
    p = catalog.model_record(qwen, 0)["svc_pricing"]
    assert p["prompt_toman_per_million"] == "175197.529270"
    assert p["completion_toman_per_million"] == "567901.229400"
    assert p["request_toman"] == "709.876537"


def test_dry_run_changes_nothing(env):
    before = snapshot(env)
    res = invoke(*sync_args(FIXTURE, "--include", "*", "--prune", "--dry-run"))
    assert res.exit_code == 0, res.output
    assert "10000.000000 → 10608.750000" in res.stdout and "6.09%" in res.stdout
    assert "openai/gone" in res.stdout and "dry run" in res.stdout
    assert snapshot(env) == before
    as_json = json.loads(invoke(*sync_args(FIXTURE, "--dry-run", "--prune", "--json")).stdout)
    assert as_json["version"] == before[0][0] and [r["model"] for r in as_json["removed"]] == ["openai/gone"]
    assert snapshot(env) == before


def test_prune_removes_the_providers_unlisted_models(env):
    res = invoke(*sync_args(FIXTURE, "--prune", "--max-change", "50", "--json"))
    assert res.exit_code == 0, res.output
    assert [r["model"] for r in json.loads(res.stdout)["removed"]] == ["openai/gone"]
    assert set(models(env)) == {"openai/gpt-4o-mini", "acme/chat-1"}


# ---- refusals: exit 1, one line, the catalog untouched ------------------------------------------

@pytest.mark.parametrize("body, message", [
    (b"<html>rate limited</html>", "not JSON"),
    (b'[{"id": "a/b"}]', "not a model list"),
    (b'{"data": {"id": "a/b"}}', "not a model list"),
    (b'{"data": []}', "no models"),
    (b'{"data": [{"name": "x", "pricing": {}}]}', "has no id"),
    (b'{"data": [{"id": "openai/gpt-4o-mini", "pricing": {"prompt": "abc", "completion": "1"}}]}',
     "pricing.prompt is not a decimal"),
    (b'{"data": [{"id": "openai/gpt-4o-mini", "pricing": {"prompt": "1e999999999", "completion": "1"}}]}',
     "not a plausible price"),
    (b'{"data": [{"id": "openai/gpt-4o-mini", "pricing": {"completion": "1"}}]}', "pricing.prompt is missing"),
])
def test_bad_sources_are_refused(env, tmp_path, body, message):
    (tmp_path / "bad.json").write_bytes(body)
    before = snapshot(env)
    res = invoke(*sync_args(tmp_path / "bad.json", "--yes"))
    assert res.exit_code == 1, res.output
    assert res.stderr.count("\n") == 1 and message in res.stderr
    assert snapshot(env) == before


@pytest.mark.parametrize("args, message", [
    (["--usd-toman", "-61500"], "usd_toman must be a positive decimal"),
    (["--usd-toman", "0"], "usd_toman must be a positive decimal"),
    (["--usd-toman", "abc"], "usd_toman must be a positive decimal"),
    (["--markup", "-1"], "markup must be a positive decimal"),
    (["--max-change", "lots"], "max_change must be a percentage"),
    (["--provider", "nobody"], "provider 'nobody' is not in the providers file"),
    (["--source", "/no/such/file.json"], "cannot read the source"),
])
def test_bad_arguments_are_refused(env, args, message):
    base = dict(zip(sync_args(FIXTURE)[2::2], sync_args(FIXTURE)[3::2]))
    base.update(dict(zip(args[0::2], args[1::2])))
    before = snapshot(env)
    res = invoke("models", "sync", *[x for kv in base.items() for x in kv])
    assert res.exit_code == 1 and message in res.stderr and res.stderr.count("\n") == 1, res.output
    assert snapshot(env) == before


def test_max_change_refuses_a_big_move_unless_confirmed(env, tmp_path):
    doc = json.loads(FIXTURE.read_text())
    doc["data"][0]["pricing"]["prompt"] = "0.0000000001"  # a broken source: prices near zero
    (tmp_path / "broken.json").write_text(json.dumps(doc))
    before = snapshot(env)
    res = invoke(*sync_args(tmp_path / "broken.json", "--json"))
    assert res.exit_code == 3, res.output
    assert "over --max-change 30%" in res.stderr and res.stderr.count("\n") == 1
    assert json.loads(res.stdout)["changed"][0]["change_pct"] == "99.93"  # (10000 − 7.0725) / 10000
    assert snapshot(env) == before
    dry = invoke(*sync_args(tmp_path / "broken.json", "--dry-run"))  # a dry run reports, exit 0
    assert dry.exit_code == 0 and "would be refused" in dry.stderr
    assert invoke(*sync_args(tmp_path / "broken.json", "--max-change", "99.93%")).exit_code == 0
    assert models(env)["openai/gpt-4o-mini"].prompt_toman_per_million == Decimal("7.0725")


def test_max_change_counts_pruned_models(env):
    res = invoke(*sync_args(FIXTURE, "--prune"))  # removes 1 of the provider's 2 models: 50%
    assert res.exit_code == 3 and "--prune removes 1 of 2 openrouter models" in res.stderr
    assert "openai/gone" in models(env)
    assert invoke(*sync_args(FIXTURE, "--prune", "--yes")).exit_code == 0
    assert "openai/gone" not in models(env)


# ---- a URL source ------------------------------------------------------------------------------

class _Source(http.server.BaseHTTPRequestHandler):
    body = b""
    delay_s = 0.0
    status = 200

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        half = len(self.body) // 2
        self.wfile.write(self.body[:half])
        self.wfile.flush()
        time.sleep(self.delay_s)  # a server that stalls part-way
        try:
            self.wfile.write(self.body[half:])
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def source_server():
    handler = type("Handler", (_Source,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/api/v1/models"
    server.shutdown()
    server.server_close()


def test_sync_from_a_url(env, source_server):
    handler, url = source_server
    handler.body = FIXTURE.read_bytes()
    res = invoke(*sync_args(url, "--include", "anthropic/*", "--json"))
    assert res.exit_code == 0, res.output
    assert [a["model"] for a in json.loads(res.stdout)["added"]] == ["anthropic/claude-3.5-sonnet"]
    assert catalog_store.read_syncs(env)["openrouter"]["source"] == url
    secret = url.replace("http://", "http://user:s3cret@")  # credentials are used, never recorded
    doc = json.loads(handler.body)
    doc["data"][0]["pricing"]["prompt"] = "0.00000016"
    handler.body = json.dumps(doc).encode()
    assert invoke(*sync_args(secret)).exit_code == 0
    assert catalog_store.read_syncs(env)["openrouter"]["source"] == url


def test_a_url_source_that_fails_is_refused(env, source_server, monkeypatch):
    handler, url = source_server
    before = snapshot(env)
    handler.body, handler.status = b'{"error": "nope"}', 503
    res = invoke(*sync_args(url))
    assert res.exit_code == 1 and "HTTP 503" in res.stderr
    handler.status = 200
    handler.body, handler.delay_s = FIXTURE.read_bytes(), 3.0
    started = time.monotonic()
    res = invoke(*sync_args(url, "--timeout", "1"))
    assert res.exit_code == 1 and "did not answer within 1 s" in res.stderr
    assert time.monotonic() - started < 2.5
    handler.delay_s = 0.0
    monkeypatch.setattr(catalog_store, "MAX_SOURCE_BYTES", 1000)
    handler.body = FIXTURE.read_bytes()  # a few kB: over the (lowered) limit
    res = invoke(*sync_args(url))
    assert res.exit_code == 1 and "larger than 1000 bytes" in res.stderr
    res = invoke(*sync_args(FIXTURE))  # a file is held to the same limit
    assert res.exit_code == 1 and "larger than 1000 bytes" in res.stderr
    res = invoke(*sync_args("http://127.0.0.1:1/models"))
    assert res.exit_code == 1 and "cannot fetch the source" in res.stderr
    assert snapshot(env) == before


@pytest.mark.parametrize("source, message", [
    ("file:///etc/passwd", "not file://"),
    ("ftp://127.0.0.1/models.json", "not ftp://"),
    ("gopher://127.0.0.1:70/x", "not gopher://"),
    ("http://2130706433/api/v1/models", "odd form"),  # 127.0.0.1 as one integer
    ("http://0x7f.1/api/v1/models", "odd form"),
    ("http://0177.0.0.1/api/v1/models", "odd form"),
    ("http://127.1/api/v1/models", "odd form"),
])
def test_sources_upgate_does_not_fetch_are_refused(env, source, message):
    before = snapshot(env)
    res = invoke(*sync_args(source))
    assert res.exit_code == 1 and message in res.stderr, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and snapshot(env) == before


def test_a_redirect_is_not_followed(env, source_server):
    """The source answers 302 to a URL that would serve a valid list: refused, nothing
    fetched from the redirect's target, nothing written."""
    handler, url = source_server
    target = []

    def do_get(self):  # noqa: N802
        if self.path.startswith("/moved"):
            target.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(FIXTURE.read_bytes())))
            self.end_headers()
            self.wfile.write(FIXTURE.read_bytes())
            return
        self.send_response(302)
        self.send_header("Location", "/moved")
        self.send_header("Content-Length", "0")
        self.end_headers()

    handler.do_GET = do_get
    before = snapshot(env)
    res = invoke(*sync_args(url, "--yes"))
    assert res.exit_code == 1 and "HTTP 302" in res.stderr and "redirects are not followed" in res.stderr
    assert target == [] and snapshot(env) == before


# ---- a running node --------------------------------------------------------------------------

def test_a_running_node_serves_synced_prices_without_restart(node, redis_url, tmp_path):
    def price():
        body = httpx.get(node.base + "/models/mock/chat-1").json()
        return body["svc_pricing"]["prompt_toman_per_million"], body["svc_pricing"]["cached_prompt_toman_per_million"]

    assert price() == ("150000.000000", "150000.000000")
    source = {"data": [{"id": "mock-chat-1", "pricing": {"prompt": "0.000002", "completion": "0.000008",
                                                         "input_cache_read": "0.0000002"}}]}
    (tmp_path / "src.json").write_text(json.dumps(source))
    outcome = catalog_store.sync(store.connect_sync(redis_url), str(tmp_path / "src.json"), provider="mock",
                                 usd_toman="65000", markup="1.2", provider_names={"mock", "dead"})
    assert outcome.applied and [c.model for c in outcome.plan.of("changed")] == \
        ["mock/chat-1", "mock/chat-1:online"]  # both are mock-chat-1 upstream; :free stays free
    deadline = time.monotonic() + 5
    while price()[0] == "150000.000000" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert price() == ("156000.000000", "15600.000000")  # 2 × 65000 × 1.2; 0.2 × 65000 × 1.2
    assert node.ctx.catalog.cost_rate("mock") == (Decimal("65000"), Decimal("1.2"))
    free = httpx.get(node.base + "/models/mock/chat-1:free").json()["svc_pricing"]
    assert free["prompt_toman_per_million"] == "0.000000"
