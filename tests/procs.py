"""Private processes for tests: redis-server, a local Redis Cluster, gateway subprocesses.

Nothing here touches the machine's shared Redis on 6379: every server gets a free port and a
temporary directory, and is killed at the end.
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

import redis


# Ports: below the kernel's ephemeral range (32768+ on Linux), so no client socket and no bind
# to port 0 ever holds one, and a slice of their own for each pytest-xdist worker, walked in
# turn: a server stopped to be restarted on its port (tests/test_faults.py, the store restart
# tests) cannot see it taken meanwhile by another worker, nor by its own worker's next server.
_PLAIN = range(10000, 20000)
_CLUSTER = range(20000, 22768)  # cluster bus = port + 10000: 30000-32767, below the range too


def _slice(ports: range) -> range:
    n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    i = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0) % n
    size = len(ports) // n
    return range(ports.start + i * size, ports.start + (i + 1) * size)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class _Walk:
    """The next ports of this worker's slice, from a random start (two test runs at once on one
    machine are unlikely to walk the same ports), skipping any that something holds."""

    def __init__(self, ports: range):
        import random

        self.ports = _slice(ports)
        self.at = random.randrange(len(self.ports))

    def next(self, *, plus: int = 0) -> int:
        for _ in range(len(self.ports)):
            port = self.ports[self.at]
            self.at = (self.at + 1) % len(self.ports)
            if _bindable(port) and (not plus or _bindable(port + plus)):
                return port
        raise RuntimeError(f"no free port in {self.ports}")


_plain, _cluster = _Walk(_PLAIN), _Walk(_CLUSTER)


def free_port() -> int:
    return _plain.next()


def free_cluster_port() -> int:
    """A port whose cluster bus port (+10000) is free too, so both fit below 65536."""
    return _cluster.next(plus=10000)


def wait_port(port: int, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


class RedisServer:
    """One redis-server on a free loopback port, no persistence."""

    def __init__(self, port: int | None = None, extra: list[str] | None = None):
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="upgate-redis-")
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        exe = shutil.which("redis-server")
        if not exe:
            raise RuntimeError("redis-server is not on PATH (.ci/run installs it)")
        self.proc = subprocess.Popen(
            # a replica's first sync starts at once, not after the default 5 s wait for others
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", self.dir, *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port).ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on {self.port}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """Three masters on loopback (and `replicas` replicas of each), joined with
    `redis-cli --cluster create`."""

    def __init__(self, replicas: int = 0):
        self.replicas = replicas
        self.nodes = [RedisServer(port=free_cluster_port(), extra=["--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                                         "--cluster-config-file", "nodes.conf"]) for _ in range(3 * (1 + replicas))]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> "RedisCluster":
        for n in self.nodes:
            n.start()
        subprocess.run(
            ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
        )
        return self._wait_ok()

    def _wait_ok(self) -> "RedisCluster":
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if all(redis.Redis(port=n.port).cluster("info").get("cluster_state") == "ok"
                       and redis.Redis(port=n.port).info("replication").get("master_link_status", "up") == "up"
                       for n in self.nodes):
                    return self
            except redis.ConnectionError:
                pass
            time.sleep(0.1)
        raise RuntimeError("local Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        """The whole cluster goes away: every node shuts down, saving its data and its cluster
        config into its directory (nothing listens on the ports until `restart`)."""
        for n in self.nodes:
            if n.proc is None:
                continue
            redis.Redis(port=n.port).save()  # then SIGKILL: SHUTDOWN SAVE lingers for seconds
            n.stop()

    def restart(self) -> "RedisCluster":
        """Start the nodes stopped by `stop` on their ports and directories: they come back with
        their data, as the same cluster."""
        for n in self.nodes:
            if n.proc is None:
                n.start()
        return self._wait_ok()

    def flush(self) -> None:
        for n in self.nodes:
            redis.Redis(port=n.port).flushall()

    def close(self) -> None:
        for n in self.nodes:
            n.close()


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout


def spawn(args: list[str], env: dict | None = None, **kw) -> subprocess.Popen:
    """Start `python -m ...`/console scripts with the current interpreter's environment, importing
    this checkout's code (not an editable install of another one), whatever their cwd."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.Popen(args, env=full_env, **kw)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 10.0) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


PYTHON = sys.executable
