"""upgate/services/signin.py and lua/signin_*.lua against a real redis-server: codes stored as
HMACs only, 120 s life, 5 tries (then even the right code is refused), one use, a 60 s resend
gap, 5 codes per phone and 20 per address an hour, unknown and shared phones throttled alike
and never verifying, and sign-up when open."""
from __future__ import annotations

import asyncio
import time

import pytest

from tests.services.test_accounts import client  # noqa: F401  (fixture)
from upgate.services import accounts, audit, phone_index, signin, transactions
from upgate.store import keyspace

SECRET = signin.secret_from_pepper("test-pepper")
PHONE = "+989121234567"


def _issue(client, phone=PHONE, address="192.0.2.1", signup_open=False):
    return signin.issue(client, SECRET, phone, address, signup_open)


def _forget_gap(r, phone=PHONE):
    """Move the phone's sends an hour's share back (as if a minute had passed), keeping the count."""
    sent = r.zrange(keyspace.signin_sent(phone), 0, -1, withscores=True)
    r.delete(keyspace.signin_sent(phone))
    for i, (member, score) in enumerate(sent):
        r.zadd(keyspace.signin_sent(phone), {member: score - 61_000 * (len(sent) - i)})


@pytest.fixture
def known(client):
    return accounts.create_account(client, "09121234567")


def test_a_code_is_stored_only_as_its_hmac(client, r, known):
    code = _issue(client)
    assert code is not None and len(code) == 6 and code.isdigit()
    stored = r.hgetall(keyspace.signin_code(PHONE))
    assert stored["digest"] == signin.digest(SECRET, PHONE, code) and code not in str(stored)
    assert 0 < r.pttl(keyspace.signin_code(PHONE)) <= 120_000
    signin.check(client, SECRET, PHONE, code)
    assert signin.account_for(client, PHONE, False, "0") == known


def test_a_code_signs_in_once(client, known):
    code = _issue(client)
    signin.check(client, SECRET, PHONE, code)
    with pytest.raises(signin.CodeExpired):
        signin.check(client, SECRET, PHONE, code)


def test_after_five_wrong_tries_even_the_right_code_is_refused(client, known):
    code = _issue(client)
    wrong = f"{(int(code) + 1) % 10 ** 6:06d}"
    for _ in range(5):
        with pytest.raises(signin.WrongCode):
            signin.check(client, SECRET, PHONE, wrong)
    with pytest.raises(signin.TooManyTries):
        signin.check(client, SECRET, PHONE, code)


def test_an_expired_code_is_refused(client, r, known):
    code = _issue(client)
    r.hset(keyspace.signin_code(PHONE), "expires_ms", int(time.time() * 1000) - 1)
    with pytest.raises(signin.CodeExpired):
        signin.check(client, SECRET, PHONE, code)


def test_resend_gap_and_five_codes_an_hour_per_phone(client, r, known):
    first = _issue(client)
    with pytest.raises(signin.TooSoon) as e:
        _issue(client)
    assert 0 < e.value.wait_s <= 60
    # the refused ask wrote nothing: the first code still verifies
    for _ in range(4):
        _forget_gap(r)
        _issue(client)
    _forget_gap(r)
    with pytest.raises(signin.TooMany) as e:
        _issue(client)
    assert e.value.wait_s > 60
    assert r.zcard(keyspace.signin_sent(PHONE)) == 5
    assert first  # (a newer code replaced it)


def test_twenty_codes_an_hour_per_address(client, r):
    for i in range(20):
        _issue(client, phone=f"+98912000{i:04d}", address="198.51.100.7")
    with pytest.raises(signin.TooMany):
        _issue(client, phone="+989120009999", address="198.51.100.7")
    _issue(client, phone="+989120009999", address="198.51.100.8")  # another address is not held back


def test_an_unknown_phone_is_throttled_alike_and_never_verifies(client, r):
    assert _issue(client) is None  # no account, sign-up closed: nothing to send
    assert r.hget(keyspace.signin_code(PHONE), "digest") == signin.NEVER
    with pytest.raises(signin.TooSoon):
        _issue(client)
    for guess in ("000000", "123456"):
        with pytest.raises(signin.WrongCode):
            signin.check(client, SECRET, PHONE, guess)


def test_a_shared_phone_cannot_sign_in(client, r, known):
    r.set(keyspace.phone_owner(PHONE), phone_index.SHARED)  # what `audit` marks
    assert _issue(client) is None


def test_open_sign_up_creates_the_account_with_its_opening_credit(client):
    code = _issue(client, signup_open=True)
    assert code is not None
    signin.check(client, SECRET, PHONE, code)
    acct = signin.account_for(client, PHONE, True, "2500")
    assert signin.account_for(client, PHONE, True, "2500") == acct  # once
    [txn] = transactions.list_transactions(client, acct)
    assert (txn["kind"], txn["amount_toman"], txn["actor"]) == ("opening", "2500.000000", "signup")
    assert accounts.show(client, acct)["phone"] == PHONE
    assert audit.run(client, deep=True)["mismatches"] == []  # the money of record adds up


class _Sender:
    def __init__(self, delay: float = 0.0, fail: bool = False):
        self.delay, self.fail, self.sent = delay, fail, []

    async def send_code(self, phone, code, text):
        await asyncio.sleep(self.delay)
        if self.fail:
            raise signin.SmsFailed("fake: refused")
        self.sent.append((phone, code, text))


def _flow(sender, signup_open=False):
    return signin.SignIn(sender, SECRET, signup_open)


def _run(client, flow, coro_fn):
    """Run one step of the flow, and the background sends it started, to their end."""
    async def call(fn, *args):
        return fn(client, *args)

    async def both():
        out = await coro_fn(call)
        await flow.drain()
        return out
    return asyncio.run(both())


def test_the_flow_accepts_any_spelling_and_withdraws_a_code_the_provider_refused(client, r, known):
    ok = _Sender()
    flow = _flow(ok)
    phone = _run(client, flow, lambda call: flow.ask(call, "۰۹۱۲ ۱۲۳ ۴۵۶۷", "192.0.2.1", lambda c: f"code {c}"))
    assert phone == PHONE and ok.sent[0][0] == PHONE and ok.sent[0][2] == f"code {ok.sent[0][1]}"
    assert _run(client, flow, lambda call: flow.verify(call, "0912-123-4567", ok.sent[0][1])) == (known, PHONE)

    _forget_gap(r)
    failing = _flow(_Sender(fail=True))
    assert _run(client, failing, lambda call: failing.ask(call, PHONE, "192.0.2.1", str)) == PHONE  # the same answer
    assert not r.exists(keyspace.signin_code(PHONE))  # the send failed: nothing to verify


def test_the_answer_never_waits_for_the_provider(client, known):
    """Known or not, the answer comes before the provider's round trip (sent in the background)."""
    slow = _Sender(delay=1.0)
    flow = _flow(slow)

    async def timed(call):
        started = time.monotonic()
        await flow.ask(call, PHONE, "192.0.2.1", str)
        return time.monotonic() - started
    assert _run(client, flow, timed) < 0.5
    assert slow.sent and slow.sent[0][0] == PHONE  # and it was sent all the same


def test_a_failing_provider_pauses_sign_in_for_every_phone_alike(client, r, known):
    failing = _flow(_Sender(fail=True), signup_open=True)  # (open: every phone's code is sent)
    for i in range(signin.HEALTH_FAILURES):
        _run(client, failing, lambda call, i=i: failing.ask(call, f"+98912555{i:04d}", f"192.0.2.{i}", str))
        assert signin.sms_paused_s(client) == (0 if i < signin.HEALTH_FAILURES - 1 else signin.HEALTH_PAUSE_S)
    for phone in (PHONE, "+989350000000"):  # known and unknown: the same refusal, nothing issued
        with pytest.raises(signin.SmsUnavailable) as e:
            _run(client, failing, lambda call, phone=phone: failing.ask(call, phone, "192.0.2.9", str))
        assert 0 < e.value.wait_s <= signin.HEALTH_PAUSE_S
        assert not r.exists(keyspace.signin_sent(phone))
    # the pause ends: the next ask tries the provider again; one success forgets the failures
    r.hset(keyspace.sms_health(), "until_ms", int(time.time() * 1000) - 1)
    ok = _flow(_Sender())
    _run(client, ok, lambda call: ok.ask(call, PHONE, "192.0.2.9", str))
    assert signin.sms_paused_s(client) == 0 and not r.exists(keyspace.sms_health())


def test_two_sends_in_one_millisecond_count_twice(client, r):
    """Each send is its own member of the phone's log: two in one millisecond (a clock that
    stood still, or a test that moves time) must not count once."""
    from upgate.store import connection as store
    keys = [keyspace.signin_code(PHONE), keyspace.signin_sent(PHONE)]
    for member in ("a1", "b2"):
        status, _ = store.script("signin_issue").call_sync(
            client, keys, [signin.NEVER, 120_000, 0, 5, signin.HOUR_MS, 1_700_000_000_000, member])
        assert int(status) == 0
    assert r.zcard(keyspace.signin_sent(PHONE)) == 2
