"""A newcomer's first minutes, as real subprocesses: `upgate demo` from an empty folder, whose
printed curl and Python lines must work as printed; `upgate serve --host` saying where it
listens, with the catalog logged in force once; `upgate-admin` readable in a pipe, and a hint
when an id is unknown to the store it reads."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from tests.gateway import CATALOG, PEPPER, load_catalog, seed
from tests.procs import free_port, spawn, stop, wait_port
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.store import connection as store

ROOT = Path(__file__).resolve().parents[1]
SRC = {"PYTHONPATH": str(ROOT)}  # this checkout, not whatever `upgate` is installed


def _banner(proc, timeout: float = 60) -> str:
    lines, deadline = [], time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Ctrl-C stops it" in line:
            break
    return "".join(lines)


def _commands(banner: str) -> dict[str, list[str]]:
    """The shell lines the banner tells the reader to run (a trailing backslash continues one)."""
    found: dict[str, list[str]] = {}
    lines = iter(banner.splitlines())
    for line in lines:
        cmd = line.strip()
        if not re.match(r"(curl|python|pip) ", cmd):
            continue
        while cmd.endswith("\\"):
            cmd = cmd[:-1] + next(lines).strip()
        found.setdefault(cmd.split()[0], []).append(cmd)
    return found


def _sh(cmd: str, cwd) -> str:
    done = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (cmd, done.stderr)
    return done.stdout


def test_the_demos_printed_lines_work_as_printed_from_an_empty_folder(tmp_path):
    port = free_port()
    proc = spawn([sys.executable, "-m", "upgate.cli", "demo", "--port", str(port)], env=SRC,
                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        banner = _banner(proc)
        cmds = _commands(banner)
        assert len(cmds["curl"]) == 3 and len(cmds["python"]) == 1, banner
        # the Python line needs the openai package, which installing upgate does not bring
        assert cmds["pip"][0].split("#")[0].strip() == "pip install openai"
        assert banner.index("pip install openai") < banner.index("python -c")
        # the store is the demo's own: upgate-admin on the default Redis cannot see it
        assert re.search(r"store\s+embedded in this process and private", banner)
        assert "upgate-admin" in banner and "redis://127.0.0.1:6379/0" in banner
        chat = json.loads(_sh(cmds["curl"][0], tmp_path))
        assert chat["choices"][0]["message"]["content"].startswith("tok0")
        me = json.loads(_sh(cmds["curl"][1], tmp_path))
        assert me["wallet"]["balance_toman"] != "100000.000000"  # the chat above was charged
        assert _sh(cmds["python"][0], tmp_path).startswith("tok0")
        # the printed admin token opens the management API: the two answers are on record
        records = json.loads(_sh(cmds["curl"][2], tmp_path))["data"]
        assert [r["model"] for r in records] == ["mock/chat-1", "mock/chat-1"]
        admin = re.search(r"admin\s+(upa_\w+)", banner).group(1)
        assert admin in cmds["curl"][2]
        assert re.search(rf"console\s+http://127\.0\.0\.1:{port}/admin/\n", banner)
        assert not list(tmp_path.iterdir())  # nothing written where it was run
    finally:
        assert stop(proc, signal.SIGINT) == 0


def test_the_demos_admin_token_signs_in_to_its_console(tmp_path):
    pytest.importorskip("upgate.console", reason="the console is not in this build yet")
    port = free_port()
    proc = spawn([sys.executable, "-m", "upgate.cli", "demo", "--port", str(port)], env=SRC,
                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        banner = _banner(proc)
        admin = re.search(r"admin\s+(upa_\w+)", banner).group(1)
        account = re.search(r"^  account\s+(\S+)", banner, re.M).group(1)
        console = re.search(r"^  console\s+(http\S+)", banner, re.M).group(1)
        with httpx.Client(timeout=10) as x:
            x.get(console + "login")
            signed_in = x.post(console + "login", data={"token": admin, "next": console,
                                                        "_xsrf": x.cookies["_xsrf"]})
            assert signed_in.status_code == 303, signed_in.text
            page = x.get(console + "accounts/" + account, follow_redirects=True)  # → its ?op= address
            assert page.status_code == 200 and "+989120000000" in page.text  # the demo's account
    finally:
        assert stop(proc, signal.SIGINT) == 0


def test_a_newcomer_signs_in_to_the_demos_dashboard_with_the_printed_code(tmp_path):
    """The banner names the dashboard and the demo account's phone; the SMS code appears in the
    demo's own terminal (the log driver, on stderr), and it signs in."""
    port = free_port()
    proc = spawn([sys.executable, "-m", "upgate.cli", "demo", "--port", str(port)], env=SRC,
                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        banner = _banner(proc)
        dashboard = re.search(r"^  dashboard\s+(http\S+)", banner, re.M).group(1)
        phone = re.search(r"sign in with the phone (\d+)", banner).group(1)
        assert dashboard == f"http://127.0.0.1:{port}/dashboard/"
        with httpx.Client(timeout=10, follow_redirects=False) as x:
            form = x.get(dashboard + "login")
            xsrf = re.search(r'name="_xsrf" value="([^"]+)"', form.text).group(1)
            sent = x.post(dashboard + "login", data={"phone": phone, "_xsrf": xsrf})
            assert sent.status_code == 200 and 'name="code"' in sent.text
            deadline, code = time.time() + 20, None
            while code is None and time.time() < deadline:
                line = proc.stdout.readline()
                if '"event":"sms"' in line:
                    assert json.loads(line[line.index("{"):])["to"] == "+989120000000"
                    code = re.search(r"[0-9]{6}", line.split('"text"')[1]).group(0)
            r = x.post(dashboard + "login/verify", data={"phone": "+989120000000", "code": code, "_xsrf": xsrf})
            assert r.status_code == 303 and r.headers["location"] == "/dashboard/"
            assert "۱۰۰٬۰۰۰" in x.get(dashboard).text  # the demo's 100,000 toman, in Persian digits
    finally:
        assert stop(proc, signal.SIGINT) == 0


def test_serve_says_where_it_listens_and_logs_the_catalog_in_force_once(tmp_path, redis_url, mock):
    load_catalog(redis_url)
    providers = tmp_path / "providers.toml"
    providers.write_text(f'[providers.mock]\nbase_url = "{mock.base_url}"\ndialect = "openai"\n'
                         '[providers.dead]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')
    port = free_port()
    err = tmp_path / "serve.err"
    with open(err, "wb") as f:
        proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                     env={**SRC, "UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER,
                          "UPGATE_PROVIDERS": str(providers)},
                     cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=f)
    try:
        wait_port(port, timeout=30, proc=proc)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        # a new version is logged once it is swapped in: seen, the start-up ones are all there
        version = catalog_store.store(store.connect_sync(redis_url),
                                catalog.parse(CATALOG.read_text(), {"mock", "dead"}))
        deadline = time.time() + 20
        while f"version {version} in force" not in err.read_text() and time.time() < deadline:
            time.sleep(0.1)
    finally:
        assert stop(proc) == 0
    log = err.read_text()
    assert f"listening on http://127.0.0.1:{port}" in log
    in_force = [line for line in log.splitlines() if "in force" in line]
    assert len(in_force) == 2 and f"version {version} in force" in in_force[1], log


def test_serve_host_binds_that_address_only(tmp_path, redis_url):
    """--host 127.0.0.2 (still loopback): 127.0.0.1 on the same port is not served."""
    providers = tmp_path / "providers.toml"
    providers.write_text('[providers.mock]\nbase_url = "http://127.0.0.1:9/v1"\ndialect = "openai"\n')
    port = free_port()
    proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--host", "127.0.0.2", "--port", str(port)],
                 env={**SRC, "UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER,
                      "UPGATE_PROVIDERS": str(providers)},
                 cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                assert httpx.get(f"http://127.0.0.2:{port}/healthz", timeout=2).status_code == 503  # answers (not ready: no catalog)
                break
            except httpx.TransportError:
                assert proc.poll() is None
                time.sleep(0.1)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    finally:
        assert stop(proc) == 0


# ---- upgate-admin
def _admin(redis_url, *args, **env):
    return CliRunner().invoke(cli, list(args), env={"UPGATE_REDIS_URL": redis_url, "COLUMNS": "40",
                                                   "UPGATE_KEY_PEPPER": PEPPER, **env},
                              catch_exceptions=False)


def test_a_table_in_a_pipe_keeps_every_cell_on_one_line(redis_url):
    """CliRunner's stdout is no terminal, and COLUMNS asks for 40: rich used to wrap each
    cell into fragments over several lines."""
    key, account_id, key_id = seed(redis_url, balance="1234.5", phone="09121234567")
    seed(redis_url, balance="7", phone="09129999999")
    out = _admin(redis_url, "account", "list").output
    assert account_id in out and "1234.500000" in out
    rows = [line for line in out.splitlines() if account_id in line]
    assert len(rows) == 1 and "+989121234567" in rows[0] and "1234.500000" in rows[0], out
    out = _admin(redis_url, "key", "list", account_id).output
    rows = [line for line in out.splitlines() if key_id in line]
    assert len(rows) == 1 and key[:10] in rows[0], out
    out = _admin(redis_url, "account", "show", account_id).output
    assert any(account_id in line and "account_id" in line for line in out.splitlines()), out


@pytest.mark.parametrize("url_env", ["set", "unset"])
def test_an_unknown_account_names_the_store_and_the_demos_private_one(redis_url, url_env):
    unknown = "00000000-0000-4000-8000-000000000000"
    if url_env == "set":
        res = _admin(redis_url, "account", "show", unknown)
        where = redis_url
    else:
        res = CliRunner().invoke(cli, ["account", "show", unknown], env={"UPGATE_REDIS_URL": None},
                                 catch_exceptions=False)
        where = "redis://127.0.0.1:6379/0 (UPGATE_REDIS_URL is not set)"
    assert res.exit_code == 1
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and f"unknown account {unknown}" in lines[0], lines
    assert where in lines[0] and "upgate demo" in lines[0] and "private" in lines[0]
