"""GET /v1/models and /v1/models/{id} on a real Tornado server, read with the real openai client.

Each "node" is a minimal Application with the two model handlers (and the shared 404 handler),
its own `Catalog` on its own event-loop thread, and a pub/sub listener doing what the gateway's
subscriber does with catalog events."""
from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace
from upgate.settings import Settings

import openai
import orjson
import pytest
import redis.asyncio as aioredis
import tornado.web

from tests.procs import free_port
from upgate import catalog, keyspace, store
from upgate.catalog import Catalog
from upgate.handlers.base import NotFoundHandler
from upgate.handlers.models import ModelHandler, ModelsHandler

KEY = "sk-up-" + "x" * 40

CATALOG = """
[[models]]
id = "acme/chat-1"
name = "Acme Chat 1"
provider = "acme"
upstream_model = "chat-1"
prompt_toman_per_million = "15000"
completion_toman_per_million = "60000.5"
request_toman = "2"
capabilities = ["chat", "completions"]
context_length = 128000
max_output_tokens = 16384

[[models]]
id = "acme/chat-1:free"
name = "Acme Chat 1 (free)"
provider = "acme"
upstream_model = "chat-1:free"
prompt_toman_per_million = "0"
completion_toman_per_million = "0"
capabilities = ["chat"]
context_length = 32000
max_output_tokens = 4096

[[models]]
id = "acme/embed-1"
provider = "acme"
prompt_toman_per_million = "20000"
completion_toman_per_million = "0"
capabilities = ["embeddings"]

[[models]]
id = "acme/secret"
provider = "acme"
prompt_toman_per_million = "1"
completion_toman_per_million = "1"
hidden = true
"""


class ModelsNode:
    """One gateway node, reduced to what the models endpoints need."""

    def __init__(self, redis_url: str):
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name=f"models-node-{self.port}")
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.port}/v1"
        self._call(self._start(redis_url))

    def _call(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self, redis_url: str) -> None:
        self.redis = aioredis.Redis.from_url(redis_url)
        self.catalog = Catalog(self.redis)
        self.pubsub = self.redis.pubsub()
        await self.pubsub.subscribe(keyspace.CHANNEL)
        await self.catalog.reload()
        self.listener = asyncio.create_task(self._listen())
        ctx = SimpleNamespace(catalog=self.catalog, settings=Settings())
        d = {"ctx": ctx}
        app = tornado.web.Application(
            [(r"/v1/models", ModelsHandler, d), (r"/v1/models/(.+)", ModelHandler, d)],
            default_handler_class=NotFoundHandler, default_handler_args=d)
        self.server = app.listen(self.port, address="127.0.0.1")

    async def _listen(self) -> None:
        while True:
            msg = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if msg is not None and msg.get("type") == "message":
                self.catalog.on_event(orjson.loads(msg["data"]))

    async def _stop(self) -> None:
        self.server.stop()
        self.listener.cancel()
        await asyncio.gather(self.listener, return_exceptions=True)
        await self.pubsub.aclose()
        await self.redis.aclose()

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base, api_key=KEY, max_retries=0, timeout=10)

    def get(self, path: str):
        """Raw GET: (status, headers, parsed JSON body)."""
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as resp:
                return resp.status, resp.headers, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, e.headers, json.loads(e.read())

    def close(self) -> None:
        try:
            self._call(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@pytest.fixture
def make_node(redis_url):
    nodes = []

    def make():
        node = ModelsNode(redis_url)
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.close()


def load(redis_url: str, text: str = CATALOG) -> str:
    return catalog.store(store.connect_sync(redis_url), catalog.parse(text, {"acme"}))


def wait_for(pred, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_before_any_catalog_the_list_is_503_pricing_unavailable(make_node):
    node = make_node()
    status, headers, body = node.get("/models")
    assert status == 503 and body["error"]["code"] == "pricing_unavailable"
    assert headers["X-Svc-Request-Id"].startswith("req_")
    with pytest.raises(openai.APIStatusError) as exc:
        node.client().models.list()
    assert exc.value.status_code == 503
    # a well-formed id cannot be priced yet; a malformed one can never exist
    assert node.get("/models/acme/chat-1")[0] == 503
    status, _, body = node.get("/models/NoPrefix")
    assert status == 404 and body["error"]["code"] == "model_not_found"


def test_list_and_retrieve_with_the_openai_client(make_node, redis_url):
    load(redis_url)
    node = make_node()
    client = node.client()

    page = client.models.list()
    ids = [m.id for m in page.data]
    assert ids == ["acme/chat-1", "acme/chat-1:free", "acme/embed-1"]  # hidden one left out
    first = page.data[0].to_dict()
    assert first["object"] == "model" and first["owned_by"] == "acme"
    assert first["svc_pricing"] == {
        "prompt_toman_per_million": "15000.000000",
        "completion_toman_per_million": "60000.500000",
        "request_toman": "2.000000",
        "web_search_toman": "0.000000",
    }

    m = client.models.retrieve("acme/chat-1:free")  # the client percent-encodes the slash
    rec = m.to_dict()
    assert rec["id"] == "acme/chat-1:free" and rec["object"] == "model"
    assert rec["owned_by"] == "acme" and rec["name"] == "Acme Chat 1 (free)"
    assert rec["context_length"] == 32000 and rec["max_output_tokens"] == 4096
    assert rec["capabilities"] == ["chat"]
    assert isinstance(rec["created"], int) and rec["created"] > 1_600_000_000
    assert rec["svc_pricing"] == {
        "prompt_toman_per_million": "0.000000", "completion_toman_per_million": "0.000000",
        "request_toman": "0.000000", "web_search_toman": "0.000000",
    }
    assert client.models.retrieve("acme/embed-1").to_dict()["capabilities"] == ["embeddings"]


@pytest.mark.parametrize("path", ["/models/acme%2Fchat-1%3Afree", "/models/acme/chat-1:free",
                                  "/models/acme%2Fchat-1:free"])
def test_retrieve_accepts_encoded_and_plain_ids(make_node, redis_url, path):
    load(redis_url)
    node = make_node()
    status, headers, body = node.get(path)
    assert status == 200 and body["id"] == "acme/chat-1:free"
    assert headers["Content-Type"].startswith("application/json")
    assert headers["X-Svc-Request-Id"].startswith("req_")


@pytest.mark.parametrize("mid", ["NoPrefix", "Upper/Case", "acme/x:bogus", "acme/secret",
                                 "acme/unknown", "acme/Chat-1", "acme/chat-1:batch"])
def test_bad_hidden_and_unknown_ids_are_404_model_not_found(make_node, redis_url, mid):
    load(redis_url)
    node = make_node()
    with pytest.raises(openai.NotFoundError) as exc:
        node.client().models.retrieve(mid)
    err = exc.value.body
    assert err["code"] == "model_not_found" and err["type"] == "model_not_found"
    assert err["param"] is None
    assert exc.value.response.headers["x-should-retry"] == "false"


def test_other_paths_under_models_are_not_found(make_node, redis_url):
    load(redis_url)
    node = make_node()
    status, _, body = node.get("/models/")
    assert status == 404 and body["error"]["code"] == "not_found"


def test_a_second_node_sees_a_new_catalog_without_restart(make_node, redis_url):
    load(redis_url)
    a, b = make_node(), make_node()
    assert [m.id for m in b.client().models.list().data] == [
        "acme/chat-1", "acme/chat-1:free", "acme/embed-1"]
    version = load(redis_url, """
[[models]]
id = "acme/chat-2"
provider = "acme"
prompt_toman_per_million = "100"
completion_toman_per_million = "300"
""")
    for node in (a, b):
        wait_for(lambda: node.catalog.version == version)
        assert [m.id for m in node.client().models.list().data] == ["acme/chat-2"]
        assert node.client().models.retrieve("acme/chat-2").to_dict()["svc_pricing"][
            "completion_toman_per_million"] == "300.000000"
        with pytest.raises(openai.NotFoundError):
            node.client().models.retrieve("acme/chat-1")


def test_a_node_started_before_any_catalog_picks_up_the_first_one(make_node, redis_url):
    node = make_node()
    assert node.get("/models")[0] == 503
    load(redis_url)
    wait_for(lambda: node.catalog.loaded)
    assert len(node.client().models.list().data) == 3
