"""How both command lines fail: one clear line on stderr, exit code 1, no traceback, nothing on
stdout — for settings that cannot work (a malformed env var or URL, a port in use, a worker count
below one) and for a store that is unreachable or refuses the command."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli as admin
from tests.procs import free_port
from tests.admin_cli.test_cli_account import UNKNOWN, admin_command


def one_line_error(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def run_admin(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*admin_command(), *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def run_upgate(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "UPGATE_KEY_PEPPER": "pep"}
    full.pop("WEB_CONCURRENCY", None)
    full.update(env)
    return subprocess.run([sys.executable, "-m", "upgate.cli", *args], env=full,
                          capture_output=True, text=True, timeout=60)


# ---- upgate-admin

@pytest.mark.parametrize("url", ["foo://x", "redis://127.0.0.1:abc/0", "redis://127.0.0.1:99999/0",
                                 "redis://127.0.0.1/0?socket_timeout=abc"])
def test_admin_malformed_redis_url(url):
    res = run_admin("account", "show", UNKNOWN, UPGATE_REDIS_URL=url)
    assert res.returncode == 1 and res.stdout == ""
    assert one_line_error(res.stderr).startswith("error: UPGATE_REDIS_URL is malformed: ")
    res = CliRunner().invoke(admin, ["account", "list", "--json"], env={"UPGATE_REDIS_URL": url})
    assert res.exit_code == 1 and res.stdout == ""
    assert one_line_error(res.stderr).startswith("error: UPGATE_REDIS_URL is malformed: ")


def test_admin_store_unreachable_exits_1():
    port = free_port()
    res = run_admin("account", "show", UNKNOWN, UPGATE_REDIS_URL=f"redis://127.0.0.1:{port}/0")
    assert res.returncode == 1 and res.stdout == ""
    line = one_line_error(res.stderr)
    assert line.startswith("error: cannot reach the store (ConnectionError: ") and str(port) in line
    res = CliRunner().invoke(admin, ["key", "list", UNKNOWN],
                             env={"UPGATE_REDIS_URL": f"redis+cluster://127.0.0.1:{port}"})
    assert res.exit_code == 1 and res.stdout == ""
    assert one_line_error(res.stderr).startswith("error: cannot reach the store (")


def test_admin_store_refusing_writes(redis_url):
    r = redis.Redis.from_url(redis_url)
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    try:
        res = CliRunner().invoke(admin, ["account", "create", "--phone", "09120000000", "--json"],
                                 env={"UPGATE_REDIS_URL": redis_url})
    finally:
        r.config_set("maxmemory", 0)
    assert res.exit_code == 1 and res.stdout == ""
    assert one_line_error(res.stderr).startswith("error: the store refused the command (")


@pytest.mark.parametrize("args, expect", [
    (["account", "show"], "Missing argument 'ACCOUNT_ID'"),
    (["usage", UNKNOWN, "--group-by", "week"], "Invalid value for '--group-by'"),
    (["account", "nope"], "No such command 'nope'"),
])
def test_admin_usage_errors_are_one_line_too(redis_url, args, expect):
    res = CliRunner().invoke(admin, args, env={"UPGATE_REDIS_URL": redis_url})
    assert res.exit_code == 1 and res.stdout == ""
    line = one_line_error(res.stderr)
    assert line.startswith("error: ") and expect in line and "--help" in line


def test_admin_help_still_exits_0():
    res = CliRunner().invoke(admin, ["account", "--help"])
    assert res.exit_code == 0 and "create" in res.stdout


# ---- upgate serve / demo

@pytest.fixture
def providers(tmp_path):
    path = tmp_path / "providers.toml"
    path.write_text('[providers.mock]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')
    return str(path)


@pytest.mark.parametrize("args, env, expect", [
    ([], {"WEB_CONCURRENCY": "abc"}, "WEB_CONCURRENCY must be a whole number"),
    ([], {"WEB_CONCURRENCY": "0"}, "WEB_CONCURRENCY must be at least 1"),
    (["--processes", "0"], {}, "--processes must be at least 1"),
    (["--processes", "-2"], {"WEB_CONCURRENCY": "4"}, "--processes must be at least 1"),
    ([], {"UPGATE_REDIS_URL": "foo://x"}, "UPGATE_REDIS_URL is malformed"),
    ([], {"UPGATE_REDIS_URL": "redis://127.0.0.1:abc/0"}, "UPGATE_REDIS_URL is malformed"),
    ([], {"UPGATE_REDIS_URL": "redis+cluster://127.0.0.1:abc"}, "UPGATE_REDIS_URL is malformed"),
    (["--port", "70000"], {}, "cannot listen on port 70000"),
])
def test_serve_refuses_settings_that_cannot_work(providers, args, env, expect):
    res = run_upgate("serve", *args, UPGATE_PROVIDERS=providers,
                     UPGATE_REDIS_URL=env.pop("UPGATE_REDIS_URL", "redis://127.0.0.1:9/0"), **env)
    assert res.returncode == 1 and res.stdout == ""
    line = one_line_error(res.stderr)
    assert line.startswith("Error: ") and expect in line, line


def _occupied_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def test_serve_and_demo_on_a_port_in_use(providers):
    holder, port = _occupied_port()
    with holder:
        res = run_upgate("serve", "--port", str(port), UPGATE_PROVIDERS=providers,
                         UPGATE_REDIS_URL="redis://127.0.0.1:9/0")
        assert res.returncode == 1 and res.stdout == ""
        line = one_line_error(res.stderr)
        assert line.startswith("Error: cannot listen on port %d" % port) and "in use" in line, line
        res = run_upgate("demo", "--port", str(port))
        assert res.returncode == 1 and res.stdout == ""
        line = one_line_error(res.stderr)
        assert line.startswith("Error: cannot listen on 127.0.0.1:%d" % port) and "in use" in line, line
