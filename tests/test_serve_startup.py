"""`upgate serve` as a real subprocess: refused configurations exit 1 with one clear line on
stderr and no traceback; a provider whose API-key variable is unset only disables that
provider (the node starts, warns, and answers its models with 503 upstream_unavailable)."""
from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from tests.gateway import PEPPER, load_catalog, seed
from tests.load_kit import wait_for, wallet, sync_client
from tests.procs import free_port, spawn, stop, wait_port

UNSET_VAR = "UPGATE_TEST_UNSET_PROVIDER_KEY"


def clean_env(**extra: str) -> dict:
    """The test process's environment without any UPGATE_* setting (nor the unset key var),
    plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UPGATE_") and k != UNSET_VAR}
    env.update(extra)
    return env


def serve_refused(env: dict, cwd, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "upgate.cli", "serve", "--port", str(free_port()), *args],
                          env=env, cwd=str(cwd), capture_output=True, text=True, timeout=60)
    return proc


def assert_one_clean_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert proc.stdout == ""
    return lines[0]


def write(path, text: str):
    path.write_text(text)
    return path


GOOD_PROVIDERS = ('[providers.mock]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')


def test_missing_providers_file(tmp_path, redis_url):
    env = clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_KEY_PEPPER=PEPPER,
                    UPGATE_PROVIDERS=str(tmp_path / "nope.toml"))
    assert_one_clean_line(serve_refused(env, tmp_path), "providers file not found", "nope.toml")


def test_missing_default_providers_file(tmp_path, redis_url):
    env = clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_KEY_PEPPER=PEPPER)  # providers.toml in cwd
    assert_one_clean_line(serve_refused(env, tmp_path), "providers file not found", "providers.toml")


def test_unknown_dialect(tmp_path, redis_url):
    providers = write(tmp_path / "p.toml", '[providers.acme]\nbase_url = "http://127.0.0.1:9/v1"\n'
                                           'dialect = "cohere"\n')  # (anthropic is one now)
    env = clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_KEY_PEPPER=PEPPER, UPGATE_PROVIDERS=str(providers))
    assert_one_clean_line(serve_refused(env, tmp_path), "[providers.acme]", "unknown dialect",
                          "'cohere'", "openai")


@pytest.mark.parametrize("pepper", [None, ""])
def test_missing_pepper_without_insecure_dev(tmp_path, redis_url, pepper):
    providers = write(tmp_path / "p.toml", GOOD_PROVIDERS)
    env = clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_PROVIDERS=str(providers))
    if pepper is not None:
        env["UPGATE_KEY_PEPPER"] = pepper
    line = assert_one_clean_line(serve_refused(env, tmp_path), "UPGATE_KEY_PEPPER", "--insecure-dev")
    assert PEPPER not in line


def test_missing_pepper_with_insecure_dev_starts(tmp_path, redis_url):
    providers = write(tmp_path / "p.toml", GOOD_PROVIDERS)
    port = free_port()
    proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--port", str(port), "--insecure-dev"],
                 env=clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_PROVIDERS=str(providers)),
                 cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=30, proc=proc)
        assert_not_ready_without_catalog(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5))
    finally:
        assert stop(proc) == 0


def assert_not_ready_without_catalog(resp: httpx.Response) -> None:
    assert resp.status_code == 503, resp.text
    body = resp.json()
    assert body["status"] == "not_ready" and body["catalog"] == "missing"
    assert "no model catalog is loaded" in body["reason"]


def test_healthz_is_not_ready_until_a_catalog_is_loaded_and_warns_of_the_placeholder_topup_url(tmp_path, redis_url):
    """No catalog: /healthz answers 503 with the reason (it used to say ok), and 200 once one is
    loaded. UPGATE_TOPUP_URL left at its placeholder: one warning line at start-up."""
    providers = write(tmp_path / "p.toml", GOOD_PROVIDERS)
    port = free_port()
    err_path = tmp_path / "serve.err"
    with open(err_path, "wb") as err:
        proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--port", str(port)],
                     env=clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_KEY_PEPPER=PEPPER,
                                   UPGATE_PROVIDERS=str(providers)),
                     cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_port(port, timeout=30, proc=proc)
            url = f"http://127.0.0.1:{port}/healthz"
            assert_not_ready_without_catalog(httpx.get(url, timeout=5))
            load_catalog(redis_url)
            wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 20, "the catalog to be picked up")
            body = httpx.get(url, timeout=5).json()
            assert body["status"] == "ok" and body["reason"] is None and body["catalog"] == "loaded"
        finally:
            assert stop(proc) == 0
    warned = [line for line in err_path.read_text().splitlines() if "UPGATE_TOPUP_URL" in line]
    assert len(warned) == 1 and "WARNING" in warned[0] and "example.invalid" in warned[0], warned


def test_a_set_topup_url_gives_no_warning(tmp_path, redis_url):
    providers = write(tmp_path / "p.toml", GOOD_PROVIDERS)
    port = free_port()
    err_path = tmp_path / "serve.err"
    with open(err_path, "wb") as err:
        proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--port", str(port)],
                     env=clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_KEY_PEPPER=PEPPER,
                                   UPGATE_PROVIDERS=str(providers),
                                   UPGATE_TOPUP_URL="https://pay.example/topup"),
                     cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_port(port, timeout=30, proc=proc)
            assert_not_ready_without_catalog(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5))
        finally:
            assert stop(proc) == 0
    log = err_path.read_text()
    assert "listening on" in log and "UPGATE_TOPUP_URL" not in log


def test_provider_with_unset_key_var_starts_warns_and_answers_503(tmp_path, redis_url, mock):
    load_catalog(redis_url)  # mock/* models on provider "mock", dead/chat on "dead"
    providers = write(tmp_path / "p.toml",
                      f'[providers.mock]\nbase_url = "{mock.base_url}"\ndialect = "openai"\n'
                      f'api_key_env = "{UNSET_VAR}"\n'
                      '[providers.dead]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')
    key, account_id, _ = seed(redis_url)
    port = free_port()
    err_path = tmp_path / "serve.err"
    with open(err_path, "wb") as err:
        proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--port", str(port)],
                     env=clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_KEY_PEPPER=PEPPER,
                                   UPGATE_PROVIDERS=str(providers)),
                     cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_port(port, timeout=30, proc=proc)
            base = f"http://127.0.0.1:{port}/v1"
            wait_for(lambda: httpx.get(base[:-3] + "/healthz", timeout=5).status_code == 200, 20,
                     "the node to report healthy")
            r = sync_client(redis_url)
            before = wallet(r, account_id)
            resp = httpx.post(base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                              json={"model": "mock/chat-1", "max_tokens": 8,
                                    "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
            assert resp.status_code == 503, resp.text
            assert resp.json() == {"error": {"message": "The provider could not be reached.",
                                             "type": "upstream_unavailable",
                                             "code": "upstream_unavailable", "param": None}}
            assert resp.headers["Retry-After"] == "30"
            assert wallet(r, account_id) == before  # nothing charged, nothing left held
            # the node is otherwise fine: the catalog is served
            assert httpx.get(base + "/models", timeout=5).status_code == 200
        finally:
            code = stop(proc)
    assert code == 0
    log = err_path.read_text()
    assert "Traceback" not in log
    warnings = [line for line in log.splitlines() if UNSET_VAR in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0] and "provider mock disabled" in warnings[0]
    assert key not in log
