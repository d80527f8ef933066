"""Sign-in never tells whether a phone has an account (issue 36), whatever the SMS provider
does: the same page and the same time for known and unknown phones while it works slowly,
fails, hangs, and on a node that just started. Before: a known phone got 503 "could not be
sent" and an unknown one the code form; a hanging provider gave 10,005 ms + 503 against
185 ms + 200; a fresh node answered unknown phones in 275-378 ms and known ones in 129-186 ms.

The provider is a loopback Kavenegar (tests/sms/fakes.py) behind the real driver."""
from __future__ import annotations

import statistics
import time

import httpx
import pytest

from tests.dashboard_kit import xsrf
from tests.load_kit import wait_for
from tests.sms.fakes import FakeKavenegar
from upgate.i18n import numbers
from upgate.services import accounts, signin
from upgate.store import connection as store, keyspace

pytestmark = pytest.mark.timeout(120)
PAIRS = 5
SAME_TIME_S = 0.1  # medians of known and unknown phones' answers differ by less than this


@pytest.fixture
def fake():
    f = FakeKavenegar()
    yield f
    f.close()


def _node(make_node, fake):
    return make_node(sms="kavenegar", sms_api_key=fake.API_KEY, sms_template="login", sms_url=fake.url)


def _ask(node, phone: str) -> tuple[int, str, float]:
    """(status, the page with the phone and token taken out, seconds)."""
    with httpx.Client(base_url=node.url, follow_redirects=False, timeout=30) as c:
        form = c.get("/dashboard/login")
        started = time.monotonic()
        r = c.post("/dashboard/login", data={"phone": phone, "_xsrf": xsrf(form.text)})
        took = time.monotonic() - started
    page = r.text.replace(phone, "PHONE").replace(numbers.localize(phone, "fa"), "PHONE").split("<main")[1].replace(xsrf(r.text), "X")
    return r.status_code, page, took


def _pairs(node, redis_url, tag: int, between=lambda i: None):
    """PAIRS asks each of a known and an unknown phone, in turn: (answers, times by kind)."""
    client = store.connect_sync(redis_url)
    answers, times = [], {"known": [], "unknown": []}
    for i in range(PAIRS):
        known, unknown = f"+98912{tag}00{i:04d}", f"+98935{tag}00{i:04d}"
        accounts.create_account(client, known)
        pair = []
        # the unknown phone first: a known phone's send changes the provider's health in Redis
        # when it fails, and a pair is compared in one state of it
        for kind, phone in (("unknown", unknown), ("known", known)):
            status, page, took = _ask(node, phone)
            times[kind].append(took)
            pair.append((status, page))
        answers.append(pair)
        between(i)
    k, u = statistics.median(times["known"]), statistics.median(times["unknown"])
    print(f"median answer: known {k * 1000:.0f} ms, unknown {u * 1000:.0f} ms; "
          f"statuses {[p[1][0] for p in answers]}")
    return answers, k, u


def _alike(answers, k, u) -> None:
    for unknown, known in answers:
        assert known == unknown, (known[0], unknown[0])
    assert abs(k - u) < SAME_TIME_S, (k, u)


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_a_fresh_node_with_a_working_provider(make_node, redis_url, fake):
    answers, k, u = _pairs(_node(make_node, fake), redis_url, 1)
    _alike(answers, k, u)
    assert {a[0][0] for a in answers} == {200}
    wait_for(lambda: len(fake.requests) == PAIRS, 10, "the known phones' texts")  # sent all the same


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_a_provider_that_hangs(make_node, redis_url, fake):
    fake.answer, fake.slow_s = "slow", 30.0  # past the driver's 10 s timeout
    answers, k, u = _pairs(_node(make_node, fake), redis_url, 2)
    _alike(answers, k, u)
    assert {a[0][0] for a in answers} == {200} and k < 1.0


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_a_provider_that_fails(make_node, redis_url, fake):
    """Every send fails: the first answers are the code form for both; once the health in Redis
    says failing, "SMS is unavailable" (503) for both. Each pair is asked in one state."""
    fake.answer = "no-credit"
    client = store.connect_sync(redis_url)

    def settled(i: int) -> None:  # the known phone's send has failed and been recorded
        wait_for(lambda: client.hget(keyspace.sms_health(), "failures") is not None
                 and int(client.hget(keyspace.sms_health(), "failures")) >= min(i + 1, signin.HEALTH_FAILURES)
                 or signin.sms_paused_s(client) > 0, 15, "the failure recorded")

    answers, k, u = _pairs(_node(make_node, fake), redis_url, 3, between=settled)
    _alike(answers, k, u)
    statuses = [a[1][0] for a in answers]
    assert statuses[:signin.HEALTH_FAILURES] == [200] * signin.HEALTH_FAILURES
    assert set(statuses[signin.HEALTH_FAILURES:]) == {503}
    unavailable = answers[-1][1][1]
    assert 'name="code"' not in unavailable and "پیامک در دسترس نیست" in unavailable
    assert not client.exists(keyspace.signin_code("+989123000000"))  # a failed send's code is withdrawn
