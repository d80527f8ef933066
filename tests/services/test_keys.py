"""upgate/services/keys.py: the key format and hash (pure), the record, and the sync key operations
against the private real redis-server (and once against a local Redis Cluster)."""
from __future__ import annotations

import json
import string
import time
from datetime import datetime, timezone

import pytest
import redis

from upgate.billing import jalali
from upgate.services import accounts, keys
from upgate.store import connection as store, keyspace

PEPPER = "test-pepper"


def snapshot(redis_url: str) -> dict:
    raw = redis.Redis.from_url(redis_url)
    return {k: raw.dump(k) for k in raw.keys("*")}


@pytest.fixture
def client(redis_url):
    return store.connect_sync(redis_url)


@pytest.fixture
def acct(client):
    return accounts.create_account(client, "09121234567", 1_000_000_000)


@pytest.fixture
def events(redis_url):
    """Subscribe to keyspace.CHANNEL; the returned function drains what arrived."""
    p = redis.Redis.from_url(redis_url).pubsub()
    p.subscribe(keyspace.CHANNEL)
    assert p.get_message(timeout=2)["type"] == "subscribe"

    def drain(wait: float = 0.3) -> list[dict]:
        out = []
        while (m := p.get_message(timeout=wait)) is not None:
            if m["type"] == "message":
                out.append(json.loads(m["data"]))
        return out

    yield drain
    p.close()


def future_ms(days: int = 30) -> int:
    return int((time.time() + days * 86400) * 1000)


# ---- format and hashing -----------------------------------------------------------------------

def test_generate_shape_and_randomness():
    made = {keys.generate() for _ in range(200)}
    assert len(made) == 200
    for k in made:
        assert k.startswith("sk-up-") and len(k) == 46
        assert set(k[6:]) <= set(string.ascii_letters + string.digits)
        assert keys.well_formed(k)


@pytest.mark.parametrize("bad", [
    "", "sk-up-", "sk-up-" + "a" * 39, "sk-up-" + "a" * 41, "sk-or-" + "a" * 40,
    "SK-UP-" + "a" * 40, "sk-up-" + "a" * 39 + "-", "sk-up-" + "a" * 39 + "é",
    "sk-up-" + "a" * 40 + "\n", " sk-up-" + "a" * 40, "sk-up-" + "a" * 4000, None, 42,
    "sk-up-" + "٣" * 40,  # non-ASCII digits
])
def test_well_formed_refuses_every_other_shape(bad):
    assert not keys.well_formed(bad)


def test_digest_is_hmac_sha256_hex_under_the_pepper():
    import hashlib
    import hmac

    k = keys.generate()
    assert keys.digest(k, "p") == hmac.new(b"p", k.encode(), hashlib.sha256).hexdigest()
    assert len(keys.digest(k, "p")) == 64
    assert keys.digest(k, "p") != keys.digest(k, "q")


def test_display():
    assert keys.display("sk-up-AbCd", "wxyz") == "sk-up-AbCd…wxyz"


# ---- validation -------------------------------------------------------------------------------

@pytest.mark.parametrize("rpm", [0, 601, -1, True, 1.5, "60", None])
def test_rpm_out_of_range(rpm):
    with pytest.raises(keys.InvalidKeySetting, match="rpm"):
        keys.check_rpm(rpm)


@pytest.mark.parametrize("text", ["0", "601", "abc", "1.5", "", " ", "-1", "1e2", "9999999"])
def test_parse_rpm_refuses(text):
    with pytest.raises(keys.InvalidKeySetting):
        keys.parse_rpm(text)


def test_parse_rpm_accepts_bounds():
    assert keys.parse_rpm("1") == 1 and keys.parse_rpm(" 600 ") == 600


@pytest.mark.parametrize("model", [
    "OpenAI/gpt-4o", "gpt-4o", "acme/", "/chat", "acme//chat", "acme/chat:turbo", "acme/chat:",
    "acme/Chat", "acme/chat:free:batch", "-acme/chat", "acme/-chat", "acme/../x", "acme chat/x", "",
])
def test_malformed_model_ids(model):
    with pytest.raises(keys.InvalidKeySetting, match="model id"):
        keys.check_models([model])


def test_models_accepted_deduplicated_and_empty_refused():
    assert keys.parse_models("acme/chat-1, acme/chat-1:free,acme/chat-1,x.y/m_1.2:online,a/b:batch") == [
        "acme/chat-1", "acme/chat-1:free", "x.y/m_1.2:online", "a/b:batch"]
    for empty in ("", ",", " , "):
        with pytest.raises(keys.InvalidKeySetting, match="at least one"):
            keys.parse_models(empty)
    with pytest.raises(keys.InvalidKeySetting):
        keys.check_models("acme/chat-1")  # a string is not a list


def test_parse_expires_forms():
    now = int(datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    day = 86400_000
    assert keys.parse_expires("2030-01-02", now) == now + day  # a date is its midnight UTC
    assert keys.parse_expires("2030-01-02T00:00:00", now) == now + day  # no zone = UTC
    assert keys.parse_expires("2030-01-02T00:00:00Z", now) == now + day
    assert keys.parse_expires("2030-01-02T03:30:00+03:30", now) == now + day
    assert keys.parse_expires("2030-01-01T00:00:00.500Z", now) == now + 500


@pytest.mark.parametrize("text", ["tomorrow", "2030-13-01", "2030-02-30", "01/02/2030", "", "1893456000"])
def test_parse_expires_refuses_malformed(text):
    with pytest.raises(keys.InvalidKeySetting, match="ISO 8601"):
        keys.parse_expires(text)


def test_parse_expires_refuses_past_and_now():
    with pytest.raises(keys.InvalidKeySetting, match="past"):
        keys.parse_expires("2001-01-01")
    now = int(time.time() * 1000)
    with pytest.raises(keys.InvalidKeySetting, match="past"):
        keys.check_expires(now, now)


def test_names():
    assert keys.check_name("  ci  ") == "ci"
    assert keys.check_name("") is None and keys.check_name(None) is None
    for bad in ("x" * 101, "a\nb", "tab\there", 5):
        with pytest.raises(keys.InvalidKeySetting):
            keys.check_name(bad)


# ---- KeyInfo ----------------------------------------------------------------------------------

def test_keyinfo_from_hash_defaults_and_full():
    minimal = keys.KeyInfo.from_hash({"account_id": "a", "key_id": "k", "prefix": "sk-up-AbCd",
                                      "last4": "wxyz", "hash": "h", "revoked": "0"})
    assert minimal == keys.KeyInfo(key_id="k", account_id="a", name=None, prefix="sk-up-AbCd",
                                   last4="wxyz", monthly_limit_micro=None, allowed_models=None,
                                   rpm=60, expires_at_ms=None, revoked=False)
    full = keys.KeyInfo.from_hash({
        b"account_id": b"a", b"key_id": b"k", b"name": b"ci", b"prefix": b"sk-up-AbCd", b"last4": b"wxyz",
        b"monthly_limit": b"5000000", b"allowed_models": b'["acme/a","acme/b:free"]', b"rpm": b"7",
        b"expires_at": b"1900000000000", b"revoked": b"1", b"held": b"3", b"spent:1405-01": b"9"})
    assert full.name == "ci" and full.monthly_limit_micro == 5_000_000 and full.rpm == 7
    assert full.allowed_models == frozenset({"acme/a", "acme/b:free"})
    assert full.expires_at_ms == 1_900_000_000_000 and full.revoked is True
    assert keys.KeyInfo.from_hash({"account_id": "a"}, key_id="given").key_id == "given"
    with pytest.raises(Exception):
        full.rpm = 1  # frozen


# ---- operations -------------------------------------------------------------------------------

def test_create_writes_exactly_the_record_and_lookups(client, r, acct, events):
    before = int(time.time())
    exp = future_ms()
    full, kid, prefix = keys.create_key(client, PEPPER, acct, name="ci", monthly_limit_micro=50_000_000,
                                        allowed_models=["acme/chat-1", "acme/chat-1:free"], rpm=120,
                                        expires_at_ms=exp)
    assert keys.well_formed(full) and prefix == full[:10] and len(kid) == 16
    h = keys.digest(full, PEPPER)
    record = r.hgetall(keyspace.key_record(acct, kid))
    created = int(record.pop("created_at"))
    assert before <= created <= time.time() + 1
    assert record == {"account_id": acct, "key_id": kid, "name": "ci", "prefix": full[:10],
                      "last4": full[-4:], "hash": h, "monthly_limit": "50000000",
                      "allowed_models": '["acme/chat-1","acme/chat-1:free"]', "rpm": "120",
                      "expires_at": str(exp), "revoked": "0"}
    assert r.get(keyspace.keyhash(h)) == f"{acct}:{kid}"
    assert r.get(keyspace.key_owner(kid)) == acct
    assert r.smembers(keyspace.account_keys(acct)) == {kid}
    info = keys.KeyInfo.from_hash(r.hgetall(keyspace.key_record(acct, kid)))
    assert info.key_id == kid and info.account_id == acct and info.rpm == 120
    assert events() == []  # a new key invalidates nothing


def test_create_defaults_leave_optional_fields_absent(client, r, acct):
    full, kid, _ = keys.create_key(client, PEPPER, acct)
    record = r.hgetall(keyspace.key_record(acct, kid))
    assert record["rpm"] == "60" and record["revoked"] == "0"
    assert not {"name", "monthly_limit", "allowed_models", "expires_at", "held"} & set(record)


def test_full_key_is_never_stored_in_plain_text(client, redis_url, acct):
    full, kid, _ = keys.create_key(client, PEPPER, acct, name="x")
    raw = redis.Redis.from_url(redis_url)
    for k in raw.keys("*"):
        blob = raw.dump(k)
        assert full.encode() not in k and full[6:].encode() not in blob and full.encode() not in blob
        if raw.type(k) == b"hash":
            for v in raw.hvals(k):
                assert full[6:].encode() not in v


def test_create_refusals_write_nothing(client, redis_url, acct):
    before = snapshot(redis_url)
    unknown = "00000000-0000-4000-8000-000000000000"
    cases = [
        (accounts.UnknownAccount, dict(account_id=unknown)),
        (accounts.UnknownAccount, dict(account_id="not-a-uuid")),
        (keys.InvalidKeySetting, dict(rpm=0)),
        (keys.InvalidKeySetting, dict(rpm=601)),
        (keys.InvalidKeySetting, dict(monthly_limit_micro=2**53 + 1)),
        (keys.InvalidKeySetting, dict(monthly_limit_micro=-1)),
        (keys.InvalidKeySetting, dict(monthly_limit_micro=1.5)),
        (keys.InvalidKeySetting, dict(allowed_models=["OpenAI/gpt"])),
        (keys.InvalidKeySetting, dict(allowed_models=[])),
        (keys.InvalidKeySetting, dict(expires_at_ms=int(time.time() * 1000) - 1)),
        (keys.PepperMissing, dict(pepper="")),
    ]
    for exc, kw in cases:
        args = {"account_id": acct, "pepper": PEPPER, **kw}
        with pytest.raises(exc):
            keys.create_key(client, args.pop("pepper"), args.pop("account_id"), **args)
    assert snapshot(redis_url) == before


def test_update_changes_and_clears_without_touching_billing_fields(client, r, acct, events):
    full, kid, _ = keys.create_key(client, PEPPER, acct, name="ci", monthly_limit_micro=5, rpm=10,
                                   allowed_models=["acme/a"], expires_at_ms=future_ms())
    month = jalali.month_key()
    rec = keyspace.key_record(acct, kid)
    r.hset(rec, mapping={"held": 7, "spent:" + month: 11})  # what the billing scripts keep
    h = keys.digest(full, PEPPER)

    view = keys.update_key(client, kid, rpm=600, monthly_limit_micro=2_000_000, name="renamed",
                           allowed_models=["acme/b", "acme/b:free"])
    assert view["rpm"] == 600 and view["monthly_limit_micro"] == 2_000_000 and view["name"] == "renamed"
    assert view["allowed_models"] == ["acme/b", "acme/b:free"]
    assert view["spent_this_month_micro"] == 11 and view["held_micro"] == 7
    assert "hash" not in view and full not in json.dumps(view)
    assert events() == [{"t": "key", "hash": h}]

    view = keys.update_key(client, kid, account_id=acct, monthly_limit_micro=None,
                           allowed_models=None, expires_at_ms=None, name=None)
    record = r.hgetall(rec)
    assert not {"monthly_limit", "allowed_models", "expires_at", "name"} & set(record)
    assert record["held"] == "7" and record["spent:" + month] == "11" and record["rpm"] == "600"
    assert view["monthly_limit_micro"] is None and view["allowed_models"] is None
    assert view["expires_at_ms"] is None and view["name"] is None
    assert events() == [{"t": "key", "hash": h}]
    assert r.get(keyspace.keyhash(h)) == f"{acct}:{kid}"  # still live


def test_update_refusals_write_and_publish_nothing(client, redis_url, acct, events):
    _, kid, _ = keys.create_key(client, PEPPER, acct)
    other = accounts.create_account(client, "09120000000")
    before = snapshot(redis_url)
    for exc, kid_, kw in [
        (keys.UnknownKey, "nope", dict(rpm=5)),
        (keys.UnknownKey, "{a:x}:evil", dict(rpm=5)),
        (keys.UnknownKey, kid, dict(rpm=5, account_id=other)),
        (keys.InvalidKeySetting, kid, dict(rpm=0)),
        (keys.InvalidKeySetting, kid, dict(rpm=None)),
        (keys.InvalidKeySetting, kid, dict()),
        (keys.InvalidKeySetting, kid, dict(allowed_models=["acme/x:paid"])),
        (keys.InvalidKeySetting, kid, dict(expires_at_ms=1000)),
        (keys.InvalidKeySetting, kid, dict(monthly_limit_micro=2**53 + 1)),
    ]:
        with pytest.raises(exc):
            keys.update_key(client, kid_, **kw)
    assert snapshot(redis_url) == before
    assert events() == []


def test_revoke_is_final_and_published(client, r, acct, events):
    full, kid, _ = keys.create_key(client, PEPPER, acct)
    h = keys.digest(full, PEPPER)
    assert keys.revoke_key(client, kid) is True
    assert r.get(keyspace.keyhash(h)) is None
    assert r.hget(keyspace.key_record(acct, kid), "revoked") == "1"
    assert r.get(keyspace.key_owner(kid)) == acct  # still resolvable, to say "revoked"
    assert events() == [{"t": "key", "hash": h}]
    assert keys.find_key(client, kid)["state"] == "revoked"
    with pytest.raises(keys.KeyRevoked, match="never return"):
        keys.update_key(client, kid, rpm=5)
    assert keys.revoke_key(client, kid) is False  # idempotent
    assert r.get(keyspace.keyhash(h)) is None
    with pytest.raises(keys.UnknownKey):
        keys.revoke_key(client, "0123456789abcdef")


def test_list_and_find_never_show_the_hash_or_the_key(client, r, acct):
    made = [keys.create_key(client, PEPPER, acct, name=f"k{i}") for i in range(3)]
    listed = keys.list_keys(client, acct)
    assert {v["key_id"] for v in listed} == {kid for _, kid, _ in made}
    text = json.dumps(listed)
    for full, kid, prefix in made:
        assert full not in text and full[6:] not in text and keys.digest(full, PEPPER) not in text
    one = keys.find_key(client, made[0][1])
    assert one["account_id"] == acct and one["prefix"] == made[0][2] and one["state"] == "active"
    assert one["display"] == keys.display(made[0][2], made[0][0][-4:])
    assert keys.list_keys(client, accounts.create_account(client, "09120000001")) == []
    with pytest.raises(accounts.UnknownAccount):
        keys.list_keys(client, "00000000-0000-4000-8000-000000000000")


def test_expired_state(client, r, acct):
    _, kid, _ = keys.create_key(client, PEPPER, acct, expires_at_ms=future_ms())
    r.hset(keyspace.key_record(acct, kid), "expires_at", int(time.time() * 1000) - 1)
    assert keys.find_key(client, kid)["state"] == "expired"
    keys.update_key(client, kid, expires_at_ms=None)  # an operator may extend an expired key
    assert keys.find_key(client, kid)["state"] == "active"


def test_memory_store_works_too(memory_url):
    client = store.connect_sync(memory_url)
    acct = accounts.create_account(client, "+989121234567")
    full, kid, _ = keys.create_key(client, PEPPER, acct, rpm=5)
    keys.update_key(client, kid, rpm=6)
    assert keys.revoke_key(client, kid)
    assert keys.list_keys(client, acct)[0]["state"] == "revoked"


@pytest.mark.cluster
def test_operations_on_a_redis_cluster(cluster_url):
    client = store.connect_sync(cluster_url)
    acct = accounts.create_account(client, "09121234567", 5_000_000)
    assert accounts.topup(client, acct, 1_000_000) == 6_000_000
    full, kid, _ = keys.create_key(client, PEPPER, acct, allowed_models=["acme/a"],
                                   expires_at_ms=future_ms())
    h = keys.digest(full, PEPPER)
    assert client.get(keyspace.keyhash(h)) == f"{acct}:{kid}".encode()
    assert keys.update_key(client, kid, rpm=9, allowed_models=None)["rpm"] == 9
    accounts.suspend(client, acct)
    assert accounts.show(client, acct)["suspended"] is True
    assert keys.revoke_key(client, kid)
    assert client.get(keyspace.keyhash(h)) is None
    assert [v["state"] for v in keys.list_keys(client, acct)] == ["revoked"]
    assert [a["account_id"] for a in accounts.list_accounts(client)] == [acct]


def test_form_settings_take_persian_digits_and_a_jalali_expiry():
    """The console's and the dashboard's key forms (keys.form_settings)."""
    from datetime import datetime, timezone

    from upgate.billing import jalali

    form = {"name": " ci ", "rate_limit_rpm": "۱۲۰", "monthly_limit_toman": "۵۰٬۰۰۰", "allowed_models": "",
            "expires_at": "۱۴۱۰/۰۱/۰۱"}
    out = keys.form_settings(lambda f: form.get(f, ""), clearing=True)
    end = datetime(2031, 3, 22, tzinfo=jalali.TEHRAN)  # 1410-01-01 (2031-03-21) ends at Tehran's midnight
    assert out == {"name": "ci", "rpm": 120, "monthly_limit_micro": 50_000_000_000, "allowed_models": None,
                   "expires_at_ms": int(end.timestamp() * 1000)}
    # the same day from a date picker is the same expiry; a time keeps its own meaning (UTC)
    assert keys.form_settings(lambda f: {"expires_at": "2031-03-21"}.get(f, ""), clearing=False) == {
        "expires_at_ms": int(end.timestamp() * 1000)}
    assert keys.form_settings(lambda f: {"expires_at": "2031-03-21T00:00:00"}.get(f, ""), clearing=False) == {
        "expires_at_ms": int(datetime(2031, 3, 21, tzinfo=timezone.utc).timestamp() * 1000)}
    for typed in ("50,000", "50000", "۵۰۰۰۰", "٥٠٬٠٠٠", "50،000"):  # every way the amount is typed
        assert keys.form_settings(lambda f: {"monthly_limit_toman": typed}.get(f, ""), clearing=False) == {
            "monthly_limit_micro": 50_000_000_000}, typed
    for typed in ("5,00", "50.000,5", "۵۰٬۰۰"):  # a separator out of place is refused, never guessed
        with pytest.raises(ValueError) as e:
            keys.form_settings(lambda f: {"monthly_limit_toman": typed}.get(f, ""), clearing=False)
        assert e.value.field == "monthly_limit_toman" and e.value.reason == "amount_malformed"
    for field, bad in (("expires_at", "1400/01/01"), ("expires_at", "1405/13/01"), ("rate_limit_rpm", "6000")):
        with pytest.raises(keys.InvalidKeySetting) as e:
            keys.form_settings(lambda f: {field: bad}.get(f, ""), clearing=False)
        assert e.value.field == field


def test_allowed_models_against_the_catalog_in_force(client):
    """keys.catalog_models, the one rule every face uses: ids and aliases (an alias becomes its
    model's id; a glob-shaped alias matches as a pattern) are known, anything else is named;
    no catalog loaded yet, nothing is unknown. check_catalog refuses (the customer's dashboard)."""
    from dataclasses import replace

    from upgate.catalog import rules, store as catalog_store

    assert keys.catalog_models(client, ["acme/anything"]) == (["acme/anything"], [])  # no catalog yet
    m, = rules.parse('[[models]]\nid = "anthropic/claude-sonnet-4.5"\nprovider = "p"\n'
                     'prompt_toman_per_million = "1"\ncompletion_toman_per_million = "2"\n'
                     'aliases = ["claude-sonnet-4-5"]\n', {"p"})
    pattern = replace(m, id="anthropic/claude-haiku-4.5", aliases=("claude-haiku-4-5-*",))
    catalog_store.store(client, [m, pattern])
    assert keys.catalog_models(client, ["claude-sonnet-4-5", "anthropic/claude-sonnet-4.5",
                                        "claude-haiku-4-5-20251001", "openai/gpt-9"]) == (
        ["anthropic/claude-sonnet-4.5", "anthropic/claude-haiku-4.5", "openai/gpt-9"], ["openai/gpt-9"])
    with pytest.raises(keys.InvalidKeySetting) as e:
        keys.check_catalog(client, ["openai/gpt-9"])
    assert (e.value.reason, e.value.field, e.value.params["model"]) == ("model_unknown", "allowed_models", "openai/gpt-9")
    assert keys.check_catalog(client, ["claude-sonnet-4-5"]) == ["anthropic/claude-sonnet-4.5"]
    # the customer's form: an alias typed there is its model's id, an unknown name is refused
    form = {"allowed_models": "claude-sonnet-4-5, anthropic/claude-haiku-4.5", "rate_limit_rpm": "۶۰"}
    assert keys.customer_form_settings(client, form, clearing=False) == {
        "allowed_models": ["anthropic/claude-sonnet-4.5", "anthropic/claude-haiku-4.5"], "rpm": 60}
    with pytest.raises(keys.InvalidKeySetting) as e:
        keys.customer_form_settings(client, {"allowed_models": "Bad Id"}, clearing=False)
    assert e.value.reason == "model_unknown" and e.value.field == "allowed_models"
