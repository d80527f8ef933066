"""upgate/catalog/rules.py, catalog_store.py, catalog_cache.py: id shape, file validation, the atomic swap, and the per-node copy."""
from __future__ import annotations

import asyncio
import threading
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
import redis
import redis.asyncio as aioredis

from upgate.catalog import store as catalog_store
from upgate.store import connection as store, keyspace
from upgate.catalog.rules import CatalogError, Model, check_allowed, model_record, parse, valid_id
from upgate.catalog.cache import Catalog
from upgate.errors import GatewayError

ROOT = Path(__file__).resolve().parents[2]
PROVIDERS = {"acme", "other"}


def entry(**fields) -> str:
    base = {"id": "acme/chat-1", "provider": "acme", "prompt_toman_per_million": "15000",
            "completion_toman_per_million": "60000"}
    base.update(fields)
    lines = ["[[models]]"]
    for k, v in base.items():
        if v is None:
            continue
        lines.append(f"{k} = {v}" if isinstance(v, _Raw) else f"{k} = {_toml(v)}")
    return "\n".join(lines) + "\n"


class _Raw(str):
    """A TOML value written verbatim (floats, ints, arrays, booleans)."""


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return '"' + v + '"'


GOOD = (
    entry()
    + entry(id="acme/chat-1:free", prompt_toman_per_million="0", completion_toman_per_million="0",
            upstream_model="chat-1-free", name="Chat 1 (free)", context_length=32000)
    + entry(id="acme/embed-1", capabilities=["embeddings"], completion_toman_per_million="0")
    + entry(id="acme/chat-1:online", web_search_toman="25.5", request_toman="1")
    + entry(id="acme/secret", hidden=True)
    + entry(id="other/cheap", provider="other", prompt_toman_per_million="100",
            completion_toman_per_million="200")
)


def models_by_id(text=GOOD):
    return {m.id: m for m in parse(text, PROVIDERS)}


# ---- ids ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mid", [
    "acme/chat-1", "openai/gpt-4o-mini", "acme/chat-1:free", "acme/x:batch", "acme/x:online",
    "meta-llama/llama-3.1-8b-instruct", "qwen/qwen-2.5-72b", "acme/org/model", "a/b",
])
def test_valid_ids(mid):
    assert valid_id(mid)


@pytest.mark.parametrize("mid", [
    "NoPrefix", "noprefix", "Upper/Case", "acme/Chat", "acme/x:bogus", "acme/x:FREE", "/acme/x",
    "acme/x/", "acme//x", "acme/../x", "acme/a..b", "acme/x:free:free", "", "acme/ x", "acme/x y",
    "acme/" + "x" * 300, "acme/.hidden", "acme/x:",
])
def test_invalid_ids(mid):
    assert not valid_id(mid)


# ---- parsing ------------------------------------------------------------------------------

def test_parse_good_file_reads_every_field():
    ms = models_by_id()
    chat = ms["acme/chat-1"]
    assert chat.upstream_model == "acme/chat-1" and chat.name == "acme/chat-1"  # defaults to id
    assert chat.prompt_toman_per_million == Decimal("15000")
    assert chat.request_toman == 0 and chat.web_search_toman == 0
    assert chat.capabilities == frozenset({"chat"})  # default capability
    assert chat.context_length is None and not chat.hidden and not chat.free and not chat.online
    free = ms["acme/chat-1:free"]
    assert free.free and not free.online and free.upstream_model == "chat-1-free"
    assert free.name == "Chat 1 (free)" and free.context_length == 32000
    online = ms["acme/chat-1:online"]
    assert online.online and online.web_search_toman == Decimal("25.5")
    assert ms["acme/secret"].hidden
    assert ms["acme/embed-1"].capabilities == frozenset({"embeddings"})


def test_integer_amounts_are_exact_and_accepted():
    m = parse(entry(prompt_toman_per_million=_Raw("15000"), request_toman=_Raw("0")), PROVIDERS)[0]
    assert m.prompt_toman_per_million == Decimal("15000") and m.request_toman == 0


def test_provider_names_none_skips_the_provider_check():
    assert parse(entry(provider="anything"), None)[0].provider == "anything"


@pytest.mark.parametrize("fields, field_name", [
    ({"provider": "nope"}, "provider"),
    ({"provider": None}, "provider"),
    ({"prompt_toman_per_million": None}, "prompt_toman_per_million"),
    ({"completion_toman_per_million": None}, "completion_toman_per_million"),
    ({"prompt_toman_per_million": "-1"}, "prompt_toman_per_million"),
    ({"prompt_toman_per_million": _Raw("-5")}, "prompt_toman_per_million"),
    ({"completion_toman_per_million": _Raw("0.5")}, "completion_toman_per_million"),
    ({"request_toman": "abc"}, "request_toman"),
    ({"request_toman": "1e3"}, "request_toman"),
    ({"request_toman": "NaN"}, "request_toman"),
    ({"web_search_toman": "0.0000001"}, "web_search_toman"),
    ({"web_search_toman": "99999999999"}, "web_search_toman"),
    ({"web_search_toman": _Raw("true")}, "web_search_toman"),
    ({"capabilities": ["chat", "vision"]}, "capability"),
    ({"capabilities": []}, "capabilities"),
    ({"capabilities": "chat"}, "capabilities"),
    ({"context_length": "128000"}, "context_length"),
    ({"context_length": _Raw("0")}, "context_length"),
    ({"max_output_tokens": _Raw("1.5")}, "max_output_tokens"),
    ({"hidden": "yes"}, "hidden"),
    ({"name": _Raw("3")}, "name"),
    ({"upstream_model": ""}, "upstream_model"),
    ({"promt_toman_per_million": "1"}, "promt_toman_per_million"),
])
def test_each_refusal_names_the_entry_and_the_field(fields, field_name):
    text = entry(id="acme/ok") + entry(id="acme/bad", **fields)
    with pytest.raises(CatalogError) as exc:
        parse(text, PROVIDERS)
    msg = str(exc.value)
    assert msg.startswith("entry 2 (acme/bad): "), msg
    assert field_name in msg
    assert "\n" not in msg


@pytest.mark.parametrize("mid", ["Acme/Chat", "noprefix", "acme/x:bogus", "acme/", "/x"])
def test_bad_ids_are_refused(mid):
    with pytest.raises(CatalogError) as exc:
        parse(entry(id=mid), PROVIDERS)
    assert f"entry 1 ({mid})" in str(exc.value) and "id" in str(exc.value)


def test_uppercase_id_message_says_lowercase():
    with pytest.raises(CatalogError, match="lowercase"):
        parse(entry(id="Acme/Chat"), PROVIDERS)


def test_missing_id_is_named_by_index():
    with pytest.raises(CatalogError, match=r"^entry 1 \(no id\): id is required"):
        parse(entry(id=None), PROVIDERS)


def test_duplicate_id_names_both_entries():
    with pytest.raises(CatalogError, match=r"entry 3 \(acme/x\): duplicate id, first defined in entry 1"):
        parse(entry(id="acme/x") + entry(id="acme/y") + entry(id="acme/x"), PROVIDERS)


def test_free_model_with_a_price_is_refused():
    with pytest.raises(CatalogError, match=r"entry 1 \(acme/x:free\): prompt_toman_per_million must be \"0\""):
        parse(entry(id="acme/x:free"), PROVIDERS)


def test_float_refusal_tells_how_to_write_it():
    with pytest.raises(CatalogError, match=r'write "0.5", not 0.5'):
        parse(entry(prompt_toman_per_million=_Raw("0.5")), PROVIDERS)


def test_unknown_provider_lists_the_known_ones():
    with pytest.raises(CatalogError, match="known: acme, other"):
        parse(entry(provider="nope"), PROVIDERS)


@pytest.mark.parametrize("text, match", [
    ("", "no \\[\\[models\\]\\] entries"),
    ("models = []", "no \\[\\[models\\]\\] entries"),
    ("[[models]\n", "not valid TOML"),
    (entry() + "\n[extra]\nx = 1\n", "unknown top-level key 'extra'"),
    ("models = [1]", "entry 1 \\(no id\\): must be a \\[\\[models\\]\\] table"),
    # one [models] table instead of [[models]] entries: the shape is named, not "no entries"
    ('[models]\nid = "acme/x"\nprovider = "acme"\n',
     "models is a single table \\(\\[models\\]\\); write each model as its own \\[\\[models\\]\\] entry"),
    ('[models.x]\nid = "acme/x"\n', "models is a single table"),
    ("[models]\n", "models is a single table"),
    ('models = "acme/x"', "models is a string; write each model as its own \\[\\[models\\]\\] entry"),
    ("models = 3", "models is an integer"),
    ("models = true", "models is a boolean"),
])
def test_file_level_refusals(text, match):
    with pytest.raises(CatalogError, match=match):
        parse(text, PROVIDERS)


def test_example_files_in_the_repo_load():
    ms = catalog_store.read_file(ROOT / "catalog.example.toml", ROOT / "providers.example.toml")
    ids = {m.id for m in ms}
    assert any(m.free for m in ms) and any(m.online for m in ms)
    assert any("embeddings" in m.capabilities for m in ms)
    assert any(not m.free and "chat" in m.capabilities for m in ms)
    assert len(ids) == len(ms)


def test_read_file_prefixes_the_path_and_checks_providers(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(entry(provider="ghost"))
    prov = tmp_path / "p.toml"
    prov.write_text('[providers.acme]\nbase_url = "http://127.0.0.1:1/v1"\n')
    with pytest.raises(CatalogError, match=rf"^{f}: entry 1 \(acme/chat-1\): provider 'ghost'"):
        catalog_store.read_file(f, prov)
    with pytest.raises(CatalogError, match="providers file not found"):
        catalog_store.read_file(f, tmp_path / "missing.toml")
    with pytest.raises(CatalogError, match="catalog file not found"):
        catalog_store.read_file(tmp_path / "none.toml", prov)


# ---- records and rules ----------------------------------------------------------------------

def test_model_record_shape_and_svc_pricing():
    m = models_by_id()["acme/chat-1:online"]
    rec = model_record(m, 1700000000)
    assert rec == {
        "id": "acme/chat-1:online", "object": "model", "created": 1700000000, "owned_by": "acme",
        "name": "acme/chat-1:online", "context_length": None, "max_output_tokens": None,
        "capabilities": ["chat"],
        "svc_pricing": {"prompt_toman_per_million": "15000.000000",
                        "completion_toman_per_million": "60000.000000",
                        "request_toman": "1.000000", "web_search_toman": "25.500000",
                        # unset cache prices are the prompt price
                        "cached_prompt_toman_per_million": "15000.000000",
                        "cache_write_toman_per_million": "15000.000000"},
    }


def test_cache_prices_are_optional_decimals():
    text = entry(cached_prompt_toman_per_million="1500.5")
    m = parse(text, PROVIDERS)[0]
    assert m.cached_prompt_toman_per_million == Decimal("1500.5")
    assert m.cache_write_toman_per_million is None
    assert m.price("cache_write_toman_per_million") == m.prompt_toman_per_million
    p = model_record(m, 0)["svc_pricing"]
    assert p["cached_prompt_toman_per_million"] == "1500.500000"
    assert p["cache_write_toman_per_million"] == "15000.000000"
    # the stored form keeps "unset" apart from "set to the prompt price"
    assert m.to_json()["cache_write_toman_per_million"] is None
    assert Model.from_json(m.to_json()) == m
    with pytest.raises(CatalogError, match="cache_write_toman_per_million must be a decimal string"):
        parse(entry(cache_write_toman_per_million=_Raw("0.5")), PROVIDERS)
    with pytest.raises(CatalogError, match="must not be negative"):
        parse(entry(cached_prompt_toman_per_million="-1"), PROVIDERS)


def test_owned_by_is_the_id_prefix_not_the_route():
    m = parse(entry(id="openai/gpt-4o-mini", provider="other"), PROVIDERS)[0]
    assert model_record(m, 0)["owned_by"] == "openai"


def test_check_allowed():
    check_allowed(None, ["acme/a", "acme/b"])
    check_allowed(frozenset({"acme/a", "acme/b"}), ["acme/a", "acme/b"])
    with pytest.raises(GatewayError) as exc:
        check_allowed(frozenset({"acme/a"}), ["acme/a", "acme/b", "acme/c"])
    assert exc.value.code == "model_not_allowed" and exc.value.status == 403
    assert "acme/b" in exc.value.message and "acme/c" not in exc.value.message
    with pytest.raises(GatewayError):
        check_allowed(frozenset({"acme/a"}), ["acme/a:free"])  # exact ids only


# ---- store: atomic replace ------------------------------------------------------------------

def test_store_and_read_round_trip(redis_url, r):
    client = store.connect_sync(redis_url)
    t0 = float(r.time()[0])
    version, updated = catalog_store.replace(client, parse(GOOD, PROVIDERS))
    assert version == "1" and abs(updated - t0) < 5
    v, at, ms = catalog_store.read(client)
    assert v == "1" and at == updated
    assert {m.id: m for m in ms} == models_by_id()  # exact, Decimals included
    assert catalog_store.store(client, parse(entry(), PROVIDERS)) == "2"
    assert [m.id for m in catalog_store.read(client)[2]] == ["acme/chat-1"]
    # no staging hash is left behind, and the catalog itself never expires
    assert sorted(r.keys("{catalog}*")) == sorted([keyspace.CATALOG, keyspace.CATALOG_META])
    assert r.ttl(keyspace.CATALOG) == -1
    stored = orjson.loads(r.hget(keyspace.CATALOG, "acme/chat-1"))
    assert stored["prompt_toman_per_million"] == "15000.000000"


def test_store_publishes_the_swap(redis_url):
    client = store.connect_sync(redis_url)
    sub = redis.Redis.from_url(redis_url).pubsub()
    sub.subscribe(keyspace.CHANNEL)
    assert sub.get_message(timeout=2)["type"] == "subscribe"
    version = catalog_store.store(client, parse(GOOD, PROVIDERS))
    msg = sub.get_message(timeout=2)
    assert orjson.loads(msg["data"]) == {"t": "catalog", "version": version}
    sub.close()


def test_refused_load_leaves_the_previous_catalog(redis_url, r, tmp_path):
    client = store.connect_sync(redis_url)
    good = tmp_path / "good.toml"
    good.write_text(GOOD)
    prov = tmp_path / "p.toml"
    prov.write_text('[providers.acme]\nbase_url = "http://127.0.0.1:1/v1"\n'
                    '[providers.other]\nbase_url = "http://127.0.0.1:1/v1"\n')
    assert catalog_store.load_file(client, good, prov) == (6, "1")
    before = (r.hgetall(keyspace.CATALOG), r.hgetall(keyspace.CATALOG_META))
    bad = tmp_path / "bad.toml"
    bad.write_text(entry(id="acme/new") + entry(id="acme/x", prompt_toman_per_million="-1"))
    with pytest.raises(CatalogError, match=r"entry 2 \(acme/x\): prompt_toman_per_million"):
        catalog_store.load_file(client, bad, prov)
    assert (r.hgetall(keyspace.CATALOG), r.hgetall(keyspace.CATALOG_META)) == before
    assert sorted(r.keys("{catalog}*")) == sorted([keyspace.CATALOG, keyspace.CATALOG_META])


def test_memory_store_supports_the_swap(memory_url):
    client = store.connect_sync(memory_url)
    assert catalog_store.store(client, parse(GOOD, PROVIDERS)) == "1"

    async def go():
        cat = Catalog(store.connect_async(memory_url))
        await cat.reload()
        return cat

    cat = asyncio.run(go())
    assert cat.version == "1" and cat.resolve("acme/chat-1").provider == "acme"


@pytest.mark.cluster
def test_swap_and_reload_on_a_cluster(cluster_url):
    client = store.connect_sync(cluster_url)
    catalog_store.store(client, parse(GOOD, PROVIDERS))
    version = catalog_store.store(client, parse(entry(), PROVIDERS))

    async def go():
        c = store.connect_async(cluster_url)
        cat = Catalog(c)
        await cat.reload()
        await c.aclose()
        return cat

    cat = asyncio.run(go())
    assert cat.version == version and [m.id for m in cat.visible()] == ["acme/chat-1"]


# ---- the node's copy --------------------------------------------------------------------------

def run(coro):
    return asyncio.run(coro)


async def _catalog(redis_url) -> Catalog:
    return Catalog(aioredis.Redis.from_url(redis_url))


def test_before_any_catalog(redis_url):
    async def go():
        cat = await _catalog(redis_url)
        await cat.reload()  # nothing stored yet: stays unloaded
        assert not cat.loaded and cat.version is None and cat.prices_updated_at is None
        assert cat.visible() == [] and cat.get("acme/chat-1") is None
        with pytest.raises(GatewayError) as exc:
            cat.resolve("acme/chat-1")
        assert exc.value.code == "pricing_unavailable" and exc.value.status == 503
        with pytest.raises(GatewayError) as exc:
            cat.list_json()
        assert exc.value.code == "pricing_unavailable"
        # a malformed id can never exist: 404 even before a catalog
        for bad in ("NoPrefix", "Upper/Case", "acme/x:bogus"):
            with pytest.raises(GatewayError) as exc:
                cat.resolve(bad)
            assert exc.value.code == "model_not_found"
        assert cat.alternative_for(models_by_id()["acme/chat-1:free"]) is None

    run(go())


def test_resolve_visible_alternative(redis_url):
    client = store.connect_sync(redis_url)
    catalog_store.store(client, parse(GOOD, PROVIDERS))

    async def go():
        cat = await _catalog(redis_url)
        await cat.reload()
        assert cat.loaded and cat.version == "1" and cat.prices_updated_at > 0
        assert cat.resolve("acme/chat-1").completion_toman_per_million == Decimal("60000")
        for missing in ("acme/secret", "acme/unknown", "Acme/Chat-1", "acme/chat-1:batch"):
            with pytest.raises(GatewayError) as exc:
                cat.resolve(missing)
            assert exc.value.code == "model_not_found" and exc.value.status == 404
        assert cat.get("acme/secret").hidden  # hidden models stay reachable internally
        assert [m.id for m in cat.visible()] == sorted(
            ["acme/chat-1", "acme/chat-1:free", "acme/embed-1", "acme/chat-1:online", "other/cheap"])
        ms = models_by_id()
        # the same id without :free
        assert cat.alternative_for(ms["acme/chat-1:free"]).id == "acme/chat-1"
        # else the cheapest visible paid chat model
        lone = parse(entry(id="acme/lone:free", prompt_toman_per_million="0",
                           completion_toman_per_million="0"), PROVIDERS)[0]
        assert cat.alternative_for(lone).id == "other/cheap"
        body = orjson.loads(cat.list_json())
        assert body["object"] == "list" and len(body["data"]) == 5
        assert cat.list_json() is cat.list_json()  # rendered once per version
        assert orjson.loads(cat.record_json("acme/chat-1:free"))["svc_pricing"]["request_toman"] == "0.000000"

    run(go())


def test_alternative_skips_a_hidden_base_model(redis_url):
    text = (entry(id="acme/x", hidden=True)
            + entry(id="acme/x:free", prompt_toman_per_million="0", completion_toman_per_million="0")
            + entry(id="acme/embed", capabilities=["embeddings"], completion_toman_per_million="1")
            + entry(id="acme/dear", completion_toman_per_million="900")
            + entry(id="acme/cheap", completion_toman_per_million="800"))
    catalog_store.store(store.connect_sync(redis_url), parse(text, PROVIDERS))

    async def go():
        cat = await _catalog(redis_url)
        await cat.reload()
        return cat.alternative_for(cat.get("acme/x:free"))

    assert run(go()).id == "acme/cheap"


def test_a_node_sees_a_new_catalog_through_the_event(redis_url):
    client = store.connect_sync(redis_url)
    catalog_store.store(client, parse(entry(id="acme/old"), PROVIDERS))

    async def go():
        cat = await _catalog(redis_url)
        await cat.reload()
        assert cat.on_event({"t": "revoke", "key": "x"}) is None  # other events are ignored
        version = catalog_store.store(client, parse(entry(id="acme/new"), PROVIDERS))
        assert cat.resolve("acme/old")  # until the event arrives, the old catalog stays
        task = cat.on_event({"t": "catalog", "version": version})
        assert task is not None
        assert cat.on_event({"t": "catalog", "version": version}) is task  # coalesced
        await task
        assert cat.version == version
        with pytest.raises(GatewayError):
            cat.resolve("acme/old")
        assert cat.resolve("acme/new").id == "acme/new"

    run(go())


def test_a_node_sees_a_new_catalog_through_the_poll(redis_url):
    client = store.connect_sync(redis_url)
    catalog_store.store(client, parse(entry(id="acme/old"), PROVIDERS))

    async def go():
        cat = await _catalog(redis_url)
        await cat.reload()
        poller = asyncio.create_task(cat.poll(0.05))
        version = catalog_store.store(client, parse(entry(id="acme/new"), PROVIDERS))  # no event seen
        for _ in range(100):
            if cat.version == version:
                break
            await asyncio.sleep(0.02)
        poller.cancel()
        assert cat.version == version and cat.resolve("acme/new")

    run(go())


def test_poll_starts_a_node_that_came_up_before_any_catalog(redis_url):
    async def go():
        cat = await _catalog(redis_url)
        await cat.reload()
        poller = asyncio.create_task(cat.poll(0.05))
        assert not cat.loaded
        catalog_store.store(store.connect_sync(redis_url), parse(entry(), PROVIDERS))
        for _ in range(100):
            if cat.loaded:
                break
            await asyncio.sleep(0.02)
        poller.cancel()
        assert cat.loaded

    run(go())


def test_reload_never_serves_a_half_loaded_catalog(redis_url):
    """Generation k has k models, all named gen-k: every snapshot a node sees is one whole
    generation, however the loads and reloads interleave."""
    client = store.connect_sync(redis_url)
    catalog_store.store(client, parse(entry(id="acme/m0", name="gen-1"), PROVIDERS))
    stop = threading.Event()

    def writer():
        k = 2
        while not stop.is_set():
            text = "".join(entry(id=f"acme/m{i}", name=f"gen-{k}") for i in range(k))
            catalog_store.store(client, parse(text, PROVIDERS))
            k = k % 40 + 1

    async def go():
        cat = await _catalog(redis_url)
        seen = set()
        for _ in range(300):
            await cat.reload()
            names = {m.name for m in cat.visible()}
            assert len(names) == 1, names
            gen = int(names.pop().split("-")[1])
            assert len(cat.visible()) == gen
            body = orjson.loads(cat.list_json())
            assert {d["name"] for d in body["data"]} == {f"gen-{gen}"}
            seen.add(cat.version)
        return seen

    t = threading.Thread(target=writer)
    t.start()
    try:
        seen = run(go())
    finally:
        stop.set()
        t.join(10)
    assert len(seen) > 3  # the writer really did swap under the reader
