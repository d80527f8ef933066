"""`upgate-admin models load|list`: CliRunner for the behaviour, one real subprocess."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli
from upgate.catalog import store as catalog_store
from upgate.store import connection as store, keyspace

ROOT = Path(__file__).resolve().parents[2]

PROVIDERS = """
[providers.acme]
base_url = "http://127.0.0.1:1/v1"
api_key_env = "UPGATE_TEST_UNSET_KEY_VAR"
"""

GOOD = """
[[models]]
id = "acme/chat-1"
provider = "acme"
upstream_model = "chat-1"
prompt_toman_per_million = "15000"
completion_toman_per_million = "60000"
request_toman = "0.5"
capabilities = ["chat", "completions"]

[[models]]
id = "acme/chat-1:free"
provider = "acme"
prompt_toman_per_million = "0"
completion_toman_per_million = "0"

[[models]]
id = "acme/secret"
provider = "acme"
prompt_toman_per_million = "1"
completion_toman_per_million = "1"
hidden = true
"""


@pytest.fixture
def env(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("UPGATE_REDIS_URL", redis_url)
    monkeypatch.delenv("UPGATE_PROVIDERS", raising=False)
    monkeypatch.chdir(tmp_path)  # no providers.toml here unless a test writes one
    (tmp_path / "providers.example.toml").write_text(PROVIDERS)
    (tmp_path / "good.toml").write_text(GOOD)
    return tmp_path


def invoke(*args, columns: int = 200):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env={"COLUMNS": str(columns)})


def test_load_then_list_json(env, r):
    res = invoke("models", "load", "good.toml", "--providers", "providers.example.toml", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["models"] == 3 and out["version"] == "1"
    assert out["prices_updated_at"].endswith("Z")
    assert r.hget(keyspace.CATALOG_META, "version") == "1"

    res = invoke("models", "list", "--json")
    assert res.exit_code == 0, res.output
    listed = json.loads(res.stdout)
    assert listed["prices_updated_at"] == out["prices_updated_at"] and listed["version"] == "1"
    by_id = {m["id"]: m for m in listed["models"]}
    assert set(by_id) == {"acme/chat-1", "acme/chat-1:free", "acme/secret"}  # hidden included
    chat = by_id["acme/chat-1"]
    assert chat["provider"] == "acme" and chat["upstream_model"] == "chat-1"
    assert chat["svc_pricing"]["request_toman"] == "0.500000" and chat["hidden"] is False
    assert by_id["acme/secret"]["hidden"] is True


def test_global_json_flag_works_too(env):
    res = invoke("--json", "models", "load", "good.toml", "--providers", "providers.example.toml")
    assert json.loads(res.stdout)["models"] == 3


def test_human_output(env):
    res = invoke("models", "load", "good.toml", "--providers", "providers.example.toml")
    assert res.exit_code == 0 and "loaded 3 models" in res.stdout and "version 1" in res.stdout
    res = invoke("models", "list")
    assert res.exit_code == 0
    assert "acme/chat-1:free" in res.stdout and "15000.000000" in res.stdout
    assert "catalog version 1" in res.stdout
    narrow = invoke("models", "list", columns=60).stdout  # folded, never cut with an ellipsis
    assert "…" not in narrow and "acme" in narrow


def test_list_before_any_catalog(env):
    res = invoke("models", "list", "--json")
    assert json.loads(res.stdout) == {"models": [], "version": None, "prices_updated_at": None,
                                       "price_syncs": {}}
    assert "no catalog loaded" in invoke("models", "list").stdout


def test_providers_default_from_env_then_providers_toml(env, monkeypatch):
    res = invoke("models", "load", "good.toml")
    assert res.exit_code == 1
    assert "providers.toml" in res.stderr and "--providers" in res.stderr
    (env / "providers.toml").write_text(PROVIDERS)
    assert invoke("models", "load", "good.toml").exit_code == 0
    monkeypatch.setenv("UPGATE_PROVIDERS", str(env / "elsewhere.toml"))
    res = invoke("models", "load", "good.toml")
    assert res.exit_code == 1 and "elsewhere.toml" in res.stderr and "--providers" in res.stderr
    monkeypatch.setenv("UPGATE_PROVIDERS", str(env / "providers.example.toml"))
    assert invoke("models", "load", "good.toml").exit_code == 0


def test_refused_file_exits_1_with_one_line_and_keeps_the_catalog(env, r):
    assert invoke("models", "load", "good.toml", "--providers", "providers.example.toml").exit_code == 0
    before = r.hgetall(keyspace.CATALOG), r.hgetall(keyspace.CATALOG_META)
    (env / "bad.toml").write_text(GOOD + """
[[models]]
id = "acme/bad"
provider = "nope"
prompt_toman_per_million = "1"
completion_toman_per_million = "1"
""")
    res = invoke("models", "load", "bad.toml", "--providers", "providers.example.toml", "--json")
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.count("\n") == 1
    assert res.stderr.startswith("error: bad.toml: entry 4 (acme/bad): provider 'nope'")
    assert "Traceback" not in res.stderr
    assert (r.hgetall(keyspace.CATALOG), r.hgetall(keyspace.CATALOG_META)) == before


@pytest.mark.parametrize("content, expect", [
    ('[[models]]\nid = "acme/x"\nprovider = "acme"\nprompt_toman_per_million = 0.5\n'
     'completion_toman_per_million = "1"\n', "entry 1 (acme/x): prompt_toman_per_million"),
    ("not toml [", "not valid TOML"),
    ("", "no [[models]] entries"),
])
def test_other_refusals(env, content, expect):
    (env / "c.toml").write_text(content)
    res = invoke("models", "load", "c.toml", "--providers", "providers.example.toml")
    assert res.exit_code == 1 and expect in res.stderr


def test_missing_catalog_file_and_bad_providers_file(env):
    res = invoke("models", "load", "none.toml", "--providers", "providers.example.toml")
    assert res.exit_code == 1 and "catalog file not found: none.toml" in res.stderr
    (env / "p.toml").write_text("[providers.acme]\n")
    res = invoke("models", "load", "good.toml", "--providers", "p.toml")
    assert res.exit_code == 1 and "base_url" in res.stderr


def test_example_files_load_through_the_subprocess(redis_url):
    """The real entry point (`python -m admin_cli`), with the repo's example files."""
    env = {"UPGATE_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "admin_cli", "models", "load", "catalog.example.toml",
         "--providers", "providers.example.toml", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["version"] == "1" and out["models"] >= 4
    assert proc.stderr == ""  # unset provider keys do not matter when loading a catalog
    version, _, models = catalog_store.read(store.connect_sync(redis_url))
    assert version == "1" and len(models) == out["models"]

    bad = subprocess.run(
        [sys.executable, "-m", "admin_cli", "models", "load", "catalog.example.toml",
         "--providers", "no-such-providers.toml"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "--providers" in bad.stderr and "Traceback" not in bad.stderr
    assert catalog_store.read(store.connect_sync(redis_url))[0] == "1"


# ---- the catalog in force: refusals leave it, a new file replaces it ----------------------------

def load_json(file: str) -> dict:
    res = invoke("models", "load", file, "--providers", "providers.example.toml", "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def listed() -> dict:
    res = invoke("models", "list", "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_a_models_table_instead_of_entries_is_named(env, r):
    load_json("good.toml")
    before = r.hgetall(keyspace.CATALOG_META)
    (env / "table.toml").write_text('[models]\nid = "acme/chat-1"\nprovider = "acme"\n'
                                    'prompt_toman_per_million = "1"\ncompletion_toman_per_million = "1"\n')
    res = invoke("models", "load", "table.toml", "--providers", "providers.example.toml")
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("error: table.toml: models is a single table ([models]); "
                                 "write each model as its own [[models]] entry")
    assert "no [[models]] entries" not in res.stderr
    assert r.hgetall(keyspace.CATALOG_META) == before


SECOND = """
[[models]]
id = "acme/chat-1"
provider = "acme"
upstream_model = "chat-1"
prompt_toman_per_million = "16000"
completion_toman_per_million = "64000"
capabilities = ["chat"]

[[models]]
id = "acme/chat-2"
provider = "acme"
prompt_toman_per_million = "100"
completion_toman_per_million = "300"
"""


def test_a_second_catalog_replaces_the_first(env, r):
    import time

    first = load_json("good.toml")
    stamp1 = float(r.hget(keyspace.CATALOG_META, "prices_updated_at"))
    time.sleep(1.05)  # prices_updated_at is shown to the second
    (env / "second.toml").write_text(SECOND)
    second = load_json("second.toml")
    assert (first["version"], second["version"]) == ("1", "2") and second["models"] == 2
    assert float(r.hget(keyspace.CATALOG_META, "prices_updated_at")) > stamp1
    assert second["prices_updated_at"] > first["prices_updated_at"]

    now = listed()
    assert now["version"] == "2" and now["prices_updated_at"] == second["prices_updated_at"]
    by_id = {m["id"]: m for m in now["models"]}
    assert set(by_id) == {"acme/chat-1", "acme/chat-2"}  # chat-1:free and the hidden one are gone
    assert by_id["acme/chat-1"]["svc_pricing"]["prompt_toman_per_million"] == "16000.000000"
    assert by_id["acme/chat-1"]["svc_pricing"]["request_toman"] == "0.000000"  # not carried over
    assert by_id["acme/chat-1"]["capabilities"] == ["chat"]
    assert set(r.hkeys(keyspace.CATALOG)) == {"acme/chat-1", "acme/chat-2"}
    assert not [k for k in r.keys("*staging*")]  # the staged copy was renamed in, nothing left


def bad_entry(**fields) -> str:
    body = {"id": '"acme/chat-9"', "provider": '"acme"', "prompt_toman_per_million": '"1"',
            "completion_toman_per_million": '"1"', **fields}
    return "\n[[models]]\n" + "".join(f"{k} = {v}\n" for k, v in body.items())


@pytest.mark.parametrize("extra, expect", [
    (bad_entry(id='"acme/Chat-9"'), "entry 4 (acme/Chat-9): id 'acme/Chat-9' is not lowercase"),
    (bad_entry(id='"ACME/CHAT-9"'), "entry 4 (ACME/CHAT-9): id 'ACME/CHAT-9' is not lowercase"),
    (bad_entry(prompt_toman_per_million='"-1"'),
     "entry 4 (acme/chat-9): prompt_toman_per_million must not be negative"),
    (bad_entry(completion_toman_per_million="-5"),
     "entry 4 (acme/chat-9): completion_toman_per_million must not be negative"),
    (bad_entry(request_toman='"abc"'), "entry 4 (acme/chat-9): request_toman must be a decimal string"),
    (bad_entry(prompt_toman_per_million='"1e3"'),
     "entry 4 (acme/chat-9): prompt_toman_per_million must be a decimal string"),
    (bad_entry(completion_toman_per_million='"1,000"'),
     "entry 4 (acme/chat-9): completion_toman_per_million must be a decimal string"),
    (bad_entry(id='"acme/chat-1"'), "entry 4 (acme/chat-1): duplicate id, first defined in entry 1"),
    (bad_entry(id='"acme/secret"'), "entry 4 (acme/secret): duplicate id, first defined in entry 3"),
])
def test_refused_entries_name_the_entry_and_keep_the_catalog(env, r, redis_url, extra, expect):
    load_json("good.toml")
    before = r.hgetall(keyspace.CATALOG), r.hgetall(keyspace.CATALOG_META)
    events = redis.Redis.from_url(redis_url).pubsub()
    events.subscribe(keyspace.CHANNEL)
    assert events.get_message(timeout=2)["type"] == "subscribe"

    (env / "bad.toml").write_text(GOOD + extra)
    res = invoke("models", "load", "bad.toml", "--providers", "providers.example.toml", "--json")
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"error: bad.toml: {expect}"), res.stderr
    assert (r.hgetall(keyspace.CATALOG), r.hgetall(keyspace.CATALOG_META)) == before
    assert events.get_message(timeout=0.3) is None  # nothing published to the nodes
    events.close()
    assert listed()["version"] == "1"
