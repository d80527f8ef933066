"""`upgate demo`: the whole gateway in one process, on the embedded store, with the built-in
mock provider, a small catalog, one funded account, one printed key and one printed admin token
(for the console and the management API), and the customer dashboard, whose sign-in codes (the
SMS `log` driver) are printed in this terminal. Ctrl-C stops it."""
from __future__ import annotations

import asyncio
import secrets
from importlib import resources

from upgate.billing import money
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.services import accounts, admin_tokens, keys
from upgate.store import connection as store
from upgate.mock import upstream as mock_upstream
from upgate.http.connection import use_uvloop
from upgate.server import bind, serve_forever
from upgate.settings import Settings
from upgate.upstream.providers import Provider

DEMO_BALANCE = "100000"
DEMO_PHONE = "09120000000"


def setup(redis_url: str, pepper: str) -> dict:
    """Load the demo catalog, create the account and key; returns what the banner prints."""
    client = store.connect_sync(redis_url)
    text = resources.files("upgate").joinpath("demo_catalog.toml").read_text(encoding="utf-8")
    catalog_store.store(client, catalog.parse(text, {"mock", "mock-anthropic"}))
    account_id = accounts.create_account(client, DEMO_PHONE, money.parse_toman(DEMO_BALANCE))
    key, key_id, _prefix = keys.create_key(client, pepper, account_id, name="demo")
    admin = admin_tokens.create(client, pepper, "demo")
    return {"account_id": account_id, "key": key, "key_id": key_id, "admin_token": admin["token"]}


def codex_config(base: str, model: str | None = None) -> str:
    """Codex's `config.toml` for a gateway (docs/client-guide.md): its Responses API, the key in
    UPGATE_API_KEY. No model: Codex's own default name, which the demo's alias pattern maps."""
    head = f'model = "{model}"\n' if model else ""
    return head + f"""model_provider = "upgate"

[model_providers.upgate]
name = "upgate"
base_url = "{base}"
env_key = "UPGATE_API_KEY"
wire_api = "responses"
"""


def banner(port: int, info: dict) -> str:
    root = f"http://127.0.0.1:{port}"
    base = root + "/v1"
    key, admin = info["key"], info["admin_token"]
    return f"""
upgate demo is running (mock provider; nothing leaves this machine).

  base URL   {base}
  API key    {key}
  account    {info['account_id']}  (balance {DEMO_BALANCE} toman)
  models     mock/chat-1 (paid), mock/chat-1:free, mock/embed-1 (embeddings),
             mock/claude-1 (the Messages API too: Claude Code's model names resolve to it;
             Codex's resolve to mock/chat-1)
  store      embedded in this process and private to it, gone when the demo stops:
             upgate-admin (which reads UPGATE_REDIS_URL, by default redis://127.0.0.1:6379/0)
             cannot see it. Explore it with the console or the management API instead,
             signed in with this admin token:
  admin      {admin}
  console    {root}/admin/
  admin API  {root}/admin/v1  (docs/admin-api.md)
  dashboard  {root}/dashboard/  (the customer's side: sign in with the phone {DEMO_PHONE}; its
             code is not texted but printed below, as a {{"event": "sms", ...}} line)
  top up     {root}/dashboard/topup  (the built-in test bank: Pay or Cancel, no real money)

Coding agents (docs/client-guide.md):

  Claude Code:
    ANTHROPIC_BASE_URL={root} ANTHROPIC_AUTH_TOKEN={key} claude

  Codex: put this in ~/.codex/config.toml (the Responses API is on in the demo),
{_indent(codex_config(base))}

    then: UPGATE_API_KEY={key} codex

Try it:

  curl -s {base}/chat/completions -H "Authorization: Bearer {key}" \\
    -H "Content-Type: application/json" \\
    -d '{{"model": "mock/chat-1", "messages": [{{"role": "user", "content": "Hello"}}]}}'

  curl -s {base}/svc/me -H "Authorization: Bearer {key}"

  curl -s {root}/admin/v1/accounts/{info['account_id']}/requests -H "Authorization: Bearer {admin}"

  pip install openai    # the OpenAI client library (installing upgate does not bring it)
  python -c 'from openai import OpenAI; c = OpenAI(base_url="{base}", api_key="{key}"); print(c.chat.completions.create(model="mock/chat-1", messages=[{{"role": "user", "content": "Hi"}}]).choices[0].message.content)'

Ctrl-C stops it.
""".rstrip() + "\n"


def _indent(text: str) -> str:
    return "\n".join("    " + line if line else "" for line in text.splitlines())


async def _main(sockets, port: int, mock_port: int) -> None:
    pepper = secrets.token_hex(16)
    root = f"http://127.0.0.1:{port}"  # payments: the built-in `fake` gateway (docs/payments.md)
    settings = Settings(redis_url="memory://", key_pepper=pepper, providers_path="(demo)", payments="fake",
                        responses=True,  # Codex speaks only the Responses API
                        public_url=root, topup_url=root + "/dashboard/topup")  # SMS: the log driver
    await mock_upstream.serve(mock_port)
    providers = {"mock": Provider(name="mock", base_url=f"http://127.0.0.1:{mock_port}/v1",
                                  api_key="mock-demo", dialect="openai", available=True),
                 # the mock's Messages API: Claude Code works against the demo (docs/client-guide.md)
                 "mock-anthropic": Provider(name="mock-anthropic", base_url=f"http://127.0.0.1:{mock_port}/v1",
                                            api_key="mock-demo", dialect="anthropic", available=True)}
    info = setup(settings.redis_url, pepper)
    await serve_forever(settings, providers, sockets,
                        ready=lambda ctx: print(banner(port, info), flush=True))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(port: int, mock_port: int | None = None) -> None:
    """Raises server.BindError, before anything starts, when the port cannot be used."""
    sockets = bind(port, "127.0.0.1")
    store.reset_memory()
    use_uvloop()
    try:
        asyncio.run(_main(sockets, port, mock_port or _free_port()))
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        pass
