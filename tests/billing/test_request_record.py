"""The packed request record (upgate/billing/request_record.py): every field survives the round
trip in the shapes the gateway writes and in odd ones, the old JSON form still reads, and the id
key the index uses is the one the record carries."""
from __future__ import annotations

import orjson
from hypothesis import given, settings, strategies as st

from upgate.billing import request_record as rr

ACCT = "11111111-2222-3333-4444-555555555555"
T = 1_790_000_000_123


def _typical(**kw) -> dict:
    base = dict(request_id="req_" + "3f" * 12, key_id="0123456789abcdef", key_prefix="sk-up-AbCd",
                model="openai/gpt-4o-mini", answered_model="openai/gpt-4o-mini", provider="openai",
                stream=True, status=200, prompt_tokens=1234, completion_tokens=56, cached_tokens=7,
                hold_micro=5_000_000, cost_micro=1_234_567, ttfb_ms=350, duration_ms=1200)
    return rr.new(**{**base, **kw})


def _public(record: dict, t: int = T) -> dict:
    """What decode must give for a record in the handler's form."""
    from upgate.billing import jalali, money

    out = {k: record.get(k) for k in rr.PUBLIC}
    out.update(account_id=ACCT, time=jalali.utc_iso(t / 1000), hold_toman=money.fmt(record["hold_micro"]),
               cost_toman=money.fmt(record["cost_micro"]), stream=bool(record["stream"]),
               route=record.get("route"), refused=record.get("route") is not None)
    return out


def test_a_typical_record_round_trips_in_about_half_the_json():
    rec = _typical()
    raw = rr.encode(rec, T)
    assert rr.decode(ACCT, raw) == _public(rec)
    assert rr.request_id_of(raw) == rec["request_id"]
    old = orjson.dumps([rec["request_id"], T, rec["key_id"], rec["key_prefix"], rec["model"],
                        rec["answered_model"], rec["provider"], 1, 200, None, 1234, 56, 7,
                        5_000_000, 1_234_567, 350, 1200])
    assert len(raw) < 0.6 * len(old), (len(raw), len(old))  # 94 bytes against 175
    assert rr.decode(ACCT, old) == _public(rec)  # the form before: still read


def test_the_id_key_is_the_records_own():
    for rid in ("req_" + "ab" * 12, "req_" + "AB" * 12, "req_ab ab" + "a" * 19, "req_x", "x\x1fy"):
        raw, key = rr.pack(_typical(request_id=rid), T)
        assert key == rr.rid_key(rid)
        assert rr.decode(ACCT, raw)["request_id"] == rid
    assert len(rr.rid_key("req_" + "ab" * 12)) == 12  # the gateway's own ids are packed
    assert rr.acct_key(ACCT) == bytes.fromhex(ACCT.replace("-", ""))
    assert rr.account_of(rr.acct_key(ACCT)) == ACCT


def test_a_refused_record_carries_its_route():
    rec = rr.refused(request_id="req_" + "0a" * 12, account_id=ACCT, key_id="0123456789abcdef",
                     key_prefix="sk-up-AbCd", route="/v1/messages", model="anthropic/claude-x", status=429,
                     code="rate_limit_exceeded", duration_ms=3)
    got = rr.decode(ACCT, rr.encode(rec, T))
    assert got == _public(rec) and got["refused"] is True and got["route"] == "/v1/messages"
    assert rr.time_of(rr.encode(rec, T)) == T


def test_nulls_zeros_and_statuses():
    rec = rr.new(request_id="req_" + "01" * 12, key_id="k", code="reaped", status=None)
    assert rr.decode(ACCT, rr.encode(rec, T)) == _public(rec)
    for status in (200, 402, 499, 502, None):
        rec = _typical(status=status, code=None if status == 200 else "x")
        assert rr.decode(ACCT, rr.encode(rec, T))["status"] == status


text = st.one_of(st.none(), st.text(max_size=40))


@settings(max_examples=300, deadline=None)
@given(rid=st.one_of(st.text(min_size=1, max_size=64), st.binary(min_size=12, max_size=12).map(
           lambda b: "req_" + b.hex())),
       key_id=st.one_of(st.none(), st.text(max_size=20), st.binary(min_size=8, max_size=8).map(bytes.hex)),
       prefix=st.one_of(st.none(), st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=6).map(
           lambda s: "sk-up-" + s)),
       model=text, answered=text, same=st.booleans(), provider=text, stream=st.booleans(),
       status=st.one_of(st.none(), st.integers(100, 599)), code=text,
       counts=st.lists(st.integers(0, 10**12), min_size=5, max_size=5),
       ttfb=st.one_of(st.none(), st.integers(0, 10**7)), duration=st.one_of(st.none(), st.integers(0, 10**7)),
       t=st.integers(0, 253_402_300_799_000))  # (the times datetime can show: up to year 9999)
def test_any_record_round_trips(rid, key_id, prefix, model, answered, same, provider, stream, status, code,
                                counts, ttfb, duration, t):
    sep = rr.SEP
    clean = lambda s: None if s is None or s == "" else s.replace(sep, "?")  # noqa: E731
    rid = rid.replace("\x00", "")[:64] or "r"
    model = clean(model)
    rec = rr.new(request_id=rid, key_id=key_id, key_prefix=prefix, model=model,
                 answered_model=model if same else answered, provider=provider, stream=stream,
                 status=status, code=code, prompt_tokens=counts[0], completion_tokens=counts[1],
                 cached_tokens=counts[2], hold_micro=counts[3], cost_micro=counts[4], ttfb_ms=ttfb,
                 duration_ms=duration)
    got = rr.decode(ACCT, rr.encode(rec, t))
    want = _public(rec, t)
    want.update(request_id=rid if len(rid.encode()) <= 255 else got["request_id"],
                key_id=clean(key_id), key_prefix=clean(prefix), model=model,
                answered_model=model if same else clean(answered), provider=clean(provider),
                code=clean(code))
    assert got == want
