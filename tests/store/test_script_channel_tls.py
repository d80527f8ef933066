"""The script channel over TLS (rediss://): it takes over the TLS transport redis-py opened."""

import asyncio
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import redis

from tests.procs import RedisServer, free_port
from upgate.store import connection as store

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def tls_redis():
    if not shutil.which("openssl"):
        pytest.skip("openssl is not on PATH to make a certificate")
    certs = Path(tempfile.mkdtemp(prefix="upgate-tls-"))
    key, cert = certs / "key.pem", certs / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    port = free_port()
    server = RedisServer(extra=["--tls-port", str(port), "--tls-cert-file", str(cert),
                                "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
                                "--tls-auth-clients", "no"])
    try:
        server.start()
    except RuntimeError:
        server.close()
        pytest.skip("this redis-server was built without TLS")
    yield f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}", server
    server.close()
    shutil.rmtree(certs, ignore_errors=True)


def test_script_calls_pipeline_over_tls(tls_redis):
    url, server = tls_redis

    async def body():
        client = store.connect_async(url)
        try:
            sha = await client.script_load("return ARGV[1]")
            replies = await asyncio.gather(*(client.scripts.execute("EVALSHA", sha, 0, f"tls-{i}") for i in range(200)))
            assert replies == [f"tls-{i}".encode() for i in range(200)]
        finally:
            await client.aclose()
    asyncio.run(body())
    plain = redis.Redis(port=server.port)
    assert plain.info("commandstats")["cmdstat_evalsha"]["calls"] == 200  # a server of its own
    plain.close()
