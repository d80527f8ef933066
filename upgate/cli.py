"""`upgate`: run the gateway (`serve`), try it in one command (`demo`), or run the fake provider.

A setting that cannot work (a malformed env var or URL, a port already in use, a worker count
below one) stops the command with one line on stderr and exit code 1, before anything starts.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile

import click

from upgate.settings import DEV_PEPPER, SettingsError, from_env

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus-client when it is imported


def _processes(option: int | None) -> int:
    """--processes, else $WEB_CONCURRENCY (what Heroku-style platforms set), else 1."""
    if option is not None:
        n, source = option, "--processes"
    else:
        raw = (os.environ.get("WEB_CONCURRENCY") or "").strip()
        if not raw:
            return 1
        try:
            n = int(raw)
        except ValueError:
            raise click.ClickException(f"WEB_CONCURRENCY must be a whole number of worker processes, "
                                       f"got {raw!r}") from None
        source = "WEB_CONCURRENCY"
    if n < 1:
        raise click.ClickException(f"{source} must be at least 1, got {n}")
    return n


def _check_redis_url(url: str) -> None:
    """Refuse a malformed UPGATE_REDIS_URL now, not as a traceback in every worker (no I/O)."""
    from redis.connection import parse_url

    from upgate.store import connection as store

    if url.startswith("memory://"):
        return
    try:
        parse_url(store.cluster_seed(url) if store.is_cluster(url) else url)
    except ValueError as e:
        raise click.ClickException(f"UPGATE_REDIS_URL is malformed: {e}") from None


def _shared_metrics_dir() -> None:
    """Several workers on one port: a scrape reaches any one of them, so they keep their
    Prometheus samples in files of one directory and /metrics sums them (prometheus-client's
    multiprocess mode). An operator's own PROMETHEUS_MULTIPROC_DIR is used as it is; otherwise
    a fresh temporary one, removed when the server exits. Must run before prometheus_client
    is imported."""
    if os.environ.get(MULTIPROC_ENV):
        os.makedirs(os.environ[MULTIPROC_ENV], exist_ok=True)
        return
    path = tempfile.mkdtemp(prefix="upgate-metrics-")
    os.environ[MULTIPROC_ENV] = path
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:  # workers inherit this hook through fork: only the parent cleans
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)


def _setup_logging() -> None:
    logging.basicConfig(level=os.environ.get("UPGATE_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """upgate: an OpenAI-compatible gateway billed from prepaid toman wallets.

    \b
    Try it:      upgate demo
    Production:  UPGATE_KEY_PEPPER=... UPGATE_REDIS_URL=redis://... upgate serve
    """


@main.command()
@click.option("--port", type=int, default=None, help="Port to listen on (default: $PORT or 8080).")
@click.option("--host", default="", help="Address to listen on (default: every interface).")
@click.option("--processes", type=int, default=None,
              help="Worker processes on one port (default: $WEB_CONCURRENCY or 1).")
@click.option("--insecure-dev", is_flag=True, help="Allow a missing UPGATE_KEY_PEPPER (development only).")
def serve(port: int | None, host: str, processes: int | None, insecure_dev: bool) -> None:
    """Serve the gateway against Redis (UPGATE_REDIS_URL) and the providers file (UPGATE_PROVIDERS).

    \b
    Example:
      UPGATE_KEY_PEPPER=$(openssl rand -hex 32) upgate serve --port 8080 --processes 2
      upgate serve --host 127.0.0.1   (this machine only)
    """
    from upgate.upstream.providers import ProvidersError, load_providers

    _setup_logging()
    try:
        settings = from_env()
    except SettingsError as e:
        raise click.ClickException(str(e)) from None
    if not settings.key_pepper:
        if not insecure_dev:
            raise click.ClickException("UPGATE_KEY_PEPPER is not set (key hashes need it); "
                                       "pass --insecure-dev only for local development")
        settings = settings.with_(key_pepper=DEV_PEPPER)
    _check_redis_url(settings.redis_url)
    processes = _processes(processes)
    try:
        providers = load_providers(settings.providers_path)
    except ProvidersError as e:
        raise click.ClickException(str(e)) from None
    if processes > 1 or os.environ.get(MULTIPROC_ENV):
        if "prometheus_client" in sys.modules and not os.environ.get(MULTIPROC_ENV):  # in-process callers
            logging.getLogger("upgate").warning("metrics: each worker keeps its own registry "
                                                "(prometheus_client was imported before serve)")
        else:
            _shared_metrics_dir()
    from upgate import server

    from upgate.migrations import DataTooNew
    from upgate.store.policy import EvictingStore

    try:
        server.run(settings, providers, port or settings.port, processes, host)
    except (server.BindError, EvictingStore, DataTooNew) as e:
        raise click.ClickException(str(e)) from None


@main.command()
@click.option("--port", type=int, default=8080, show_default=True, help="Gateway port.")
def demo(port: int) -> None:
    """Run the gateway on the embedded store with the built-in mock provider and a ready key.

    No Redis and no provider keys are needed. Prints a key, a curl line and a Python snippet.
    """
    from upgate import demo as demo_mod
    from upgate.server import BindError

    _setup_logging()
    try:
        demo_mod.run(port)
    except BindError as e:
        raise click.ClickException(str(e)) from None


@main.command("mock-upstream")
@click.option("--port", type=int, default=9090, show_default=True)
def mock_upstream(port: int) -> None:
    """Run the fake OpenAI-compatible provider on 127.0.0.1 (tests, demo, benchmark)."""
    from upgate.mock.upstream import main as mock_main

    _setup_logging()
    mock_main(port)


if __name__ == "__main__":
    main()
