"""The benchmark's private world: redis-server, the mock provider and one gateway process,
all on 127.0.0.1, seeded with a catalog, accounts and keys, and all killed at the end.

CPU placement (when the machine has at least 2 CPUs and pinning is on): the gateway gets
CPU 0 to itself; redis-server, the mock provider and the load generator (this process)
share the others. So on a 2-core machine the gateway owns one core and everything else
competes for the second.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import orjson

PEPPER = "bench-pepper-not-a-secret"
MOCK_KEY = "sk-bench-mock"
MODEL = "mock/bench-1"
BALANCE_TOMAN = 1_000_000_000  # 10^15 micro-toman: far below the 2^53 ceiling, never runs out
KEY_RPM = 600

PROVIDERS_TOML = """\
[providers.mock]
base_url = "http://127.0.0.1:{port}/v1"
api_key_env = "BENCH_MOCK_KEY"
dialect = "openai"
"""

CATALOG_TOML = f"""\
[[models]]
id = "{MODEL}"
provider = "mock"
upstream_model = "mock-bench-1"
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"
capabilities = ["chat"]
context_length = 128000
max_output_tokens = 16384
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f} s")


def rss_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in kB, from /proc/PID/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":", 1)
                out[name] = int(value.split()[0])
    return out


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, kernel) CPU seconds a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    return sum(cpu_split(pid))


def machine_busy_seconds() -> float:
    """CPU seconds every CPU has spent busy since boot (all processes, kernel included)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass
class Account:
    account_id: str
    key: str


@dataclass
class Stack:
    """Start with `with Stack(...) as s:`; every child process dies on exit, errors included."""

    accounts: int = 400
    pin: bool = True
    redis_port: int = 0
    mock_port: int = 0
    gateway_port: int = 0
    keys: list[Account] = field(default_factory=list)
    placement: str = "not pinned"
    # a command to run a process under, by name ("gateway", "redis"): e.g. valgrind
    # (bench/instructions.py); such a process gets minutes, not seconds, to start
    wrap: dict = field(default_factory=dict)
    # more of the providers file, the catalog and the gateway's environment (bench/failover.py)
    extra_providers: str = ""
    extra_catalog: str = ""
    extra_env: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="upgate-bench-"))
        self.procs: dict[str, subprocess.Popen] = {}
        cpus = sorted(os.sched_getaffinity(0))
        self.gateway_cpus = self.other_cpus = None
        if self.pin and len(cpus) >= 2:
            self.gateway_cpus, self.other_cpus = {cpus[0]}, set(cpus[1:])
            self.placement = (f"gateway on CPU {cpus[0]}; redis-server, mock provider and load "
                              f"generator on CPU {','.join(map(str, cpus[1:]))}")

    # -- lifecycle
    def __enter__(self) -> "Stack":
        self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        self._old_cpus = os.sched_getaffinity(0)
        try:
            if self.other_cpus:
                os.sched_setaffinity(0, self.other_cpus)
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self.redis_port, self.mock_port, self.gateway_port = free_port(), free_port(), free_port()
        self._start_redis()
        self._start_mock()
        self.seed()
        self.start_gateway()

    def close(self) -> None:
        for name in ("gateway", "mock", "redis"):
            self.stop(name)
        signal.signal(signal.SIGTERM, getattr(self, "_old_term", signal.SIG_DFL))
        if getattr(self, "_old_cpus", None):  # the next stack (--ab) must see every CPU again
            os.sched_setaffinity(0, self._old_cpus)
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop(self, name: str, grace_s: float = 5.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _spawn(self, name: str, args: list[str], cpus, env: dict | None = None) -> subprocess.Popen:
        args = [*self.wrap.get(name, ()), *args]
        out = open(self.dir / f"{name}.out", "wb")
        err = open(self.dir / f"{name}.err", "wb")
        proc = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})},
                                start_new_session=True)  # Ctrl-C reaches us; we stop them
        out.close()
        err.close()
        self.procs[name] = proc
        if cpus:
            os.sched_setaffinity(proc.pid, cpus)
        return proc

    def tail(self, name: str, lines: int = 30) -> str:
        text = ""
        for suffix in ("err", "out"):
            p = self.dir / f"{name}.{suffix}"
            if p.exists():
                text += "".join(p.read_text(errors="replace").splitlines(True)[-lines:])
        return text

    # -- the three processes
    def _start_redis(self) -> None:
        exe = shutil.which("redis-server")
        if not exe:
            raise RuntimeError("redis-server is not on PATH")
        proc = self._spawn("redis", [exe, "--port", str(self.redis_port), "--bind", "127.0.0.1",
                                     "--save", "", "--appendonly", "no", "--dir", str(self.dir)],
                           self.other_cpus)
        wait_port(self.redis_port, proc, 120 if "redis" in self.wrap else 20)
        self.redis = self.redis_client()
        deadline = time.monotonic() + (120 if "redis" in self.wrap else 10)
        while True:
            try:
                self.redis.ping()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def redis_client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.redis_port)

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def _start_mock(self) -> None:
        proc = self._spawn("mock", [sys.executable, "-m", "upgate.cli", "mock-upstream",
                                    "--port", str(self.mock_port)], self.other_cpus,
                           {"UPGATE_LOG_LEVEL": "WARNING"})  # no access-log line per request
        wait_port(self.mock_port, proc)

    def start_gateway(self) -> None:
        providers = self.dir / "providers.toml"
        providers.write_text(PROVIDERS_TOML.format(port=self.mock_port) + self.extra_providers.format(port=self.mock_port))
        env = {"UPGATE_REDIS_URL": self.redis_url, "UPGATE_KEY_PEPPER": PEPPER,
               "UPGATE_PROVIDERS": str(providers), "BENCH_MOCK_KEY": MOCK_KEY,
               "UPGATE_JOURNAL": str(self.dir / "settle.journal"), "PYTHONUNBUFFERED": "0", **self.extra_env}
        args = [sys.executable, "-m", "upgate.cli", "serve", "--port", str(self.gateway_port)]
        proc = self._spawn("gateway", args, self.gateway_cpus, env)
        try:
            slow = "gateway" in self.wrap
            wait_port(self.gateway_port, proc, timeout=600 if slow else 30)
            self._wait_healthy(600 if slow else 20)
        except Exception as e:
            raise RuntimeError(f"the gateway did not start: {e}\n{self.tail('gateway')}") from None

    def _wait_healthy(self, timeout: float = 20.0) -> None:
        url = f"http://127.0.0.1:{self.gateway_port}/healthz"
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    doc = orjson.loads(r.read())
                    if doc.get("catalog") == "loaded":
                        return
                    last = str(doc)
            except Exception as e:  # not up yet, or 503 while it connects to Redis
                last = str(e)
            time.sleep(0.1)
        raise TimeoutError(f"/healthz never reported a loaded catalog ({last})")

    @property
    def gateway_pid(self) -> int:
        return self.procs["gateway"].pid

    # -- data
    def seed(self) -> None:
        """The catalog (one paid chat model), and `accounts` funded accounts with one key each."""
        from upgate.billing import money
        from upgate.catalog import rules as catalog, store as catalog_store
        from upgate.services import accounts, keys
        from upgate.store import connection as store

        client = store.connect_sync(self.redis_url)
        catalog_store.store(client, catalog.parse(CATALOG_TOML + self.extra_catalog, None))
        balance = money.parse_toman(str(BALANCE_TOMAN))
        self.keys = []
        for i in range(self.accounts):
            account_id = accounts.create_account(client, f"0912{i:07d}", balance)
            key = keys.create_key(client, PEPPER, account_id, rpm=KEY_RPM)[0]
            self.keys.append(Account(account_id, key))

    # -- Redis accounting
    def commandstats(self) -> dict[str, int]:
        """Calls per command since start (commands run inside scripts are counted too)."""
        stats = self.redis.info("commandstats")
        return {name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()}


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class Monitor:
    """Counts the commands Redis receives from clients (not from inside Lua scripts) with
    MONITOR, over a bounded window: `with Monitor(port) as m: ...; m.counts`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.counts: dict[str, int] = {}
        self.in_scripts: dict[str, int] = {}

    def __enter__(self) -> "Monitor":
        import threading

        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.sock.sendall(b"MONITOR\r\n")
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        self.ready.wait(5)
        return self

    def _read(self) -> None:
        buf = b""
        self.sock.settimeout(0.2)
        deadline = time.monotonic() + 300
        while not (self.stopping.is_set() and not buf) and time.monotonic() < deadline:
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                if self.stopping.is_set():
                    break
                continue
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\r\n")
            for line in lines:
                if line == b"+OK":
                    self.ready.set()
                    continue
                # +1700000000.123456 [0 127.0.0.1:5555] "fcall" "..."   ([0 lua] inside scripts)
                try:
                    src = line.split(b"[", 1)[1].split(b"]", 1)
                    cmd = src[1].split(b'"', 2)[1].decode().lower()
                except IndexError:
                    continue
                target = self.in_scripts if b" lua" in src[0] else self.counts
                target[cmd] = target.get(cmd, 0) + 1

    def __exit__(self, *exc) -> None:
        time.sleep(0.2)  # let the last lines arrive
        self.stopping.set()
        self.thread.join(5)
        self.sock.close()
        self.counts.pop("monitor", None)
