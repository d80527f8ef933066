"""`upgate`: run the gateway (`serve`), try it in one command (`demo`), or run the fake provider."""
from __future__ import annotations

import logging
import os
import sys

import click

from upgate.settings import SettingsError, from_env

DEV_PEPPER = "upgate-insecure-dev-pepper"


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
@click.option("--processes", type=int, default=None,
              help="Worker processes on one port (default: $WEB_CONCURRENCY or 1).")
@click.option("--insecure-dev", is_flag=True, help="Allow a missing UPGATE_KEY_PEPPER (development only).")
def serve(port: int | None, processes: int | None, insecure_dev: bool) -> None:
    """Serve the gateway against Redis (UPGATE_REDIS_URL) and the providers file (UPGATE_PROVIDERS).

    \b
    Example:
      UPGATE_KEY_PEPPER=$(openssl rand -hex 32) upgate serve --port 8080 --processes 2
    """
    from upgate import server
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
    try:
        providers = load_providers(settings.providers_path)
    except ProvidersError as e:
        raise click.ClickException(str(e)) from None
    processes = processes or int(os.environ.get("WEB_CONCURRENCY") or 1)
    if processes < 1:
        raise click.ClickException("--processes must be at least 1")
    server.run(settings, providers, port or settings.port, processes)


@main.command()
@click.option("--port", type=int, default=8080, show_default=True, help="Gateway port.")
def demo(port: int) -> None:
    """Run the gateway on the embedded store with the built-in mock provider and a ready key.

    No Redis and no provider keys are needed. Prints a key, a curl line and a Python snippet.
    """
    from upgate import demo as demo_mod

    _setup_logging()
    demo_mod.run(port)


@main.command("mock-upstream")
@click.option("--port", type=int, default=9090, show_default=True)
def mock_upstream(port: int) -> None:
    """Run the fake OpenAI-compatible provider on 127.0.0.1 (tests, demo, benchmark)."""
    from upgate.mock_upstream import main as mock_main

    _setup_logging()
    mock_main(port)


if __name__ == "__main__":
    main()
