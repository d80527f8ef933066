"""No accepted body holds the node's loop (issue 36): 90,000 one-character messages (2.7 MB,
inside every limit) on /v1/messages, count_tokens and /v1/chat/completions, and 20,000 tools,
sent by a key without balance and by a funded one, cost the loop at most 50 ms each: their
translation, validation and prompt estimate run off the loop (upgate/handlers/body_work.py).

Measured as tests/test_event_loop_blocking.py does (LoopLag: the node loop thread's CPU between
two ticks of a probe, robust on a shared machine), with a /healthz poller beside it whose
longest wait is printed (wall time: on this 2-core machine shared by the whole suite it also
holds the OS's own pauses). Before: 225-340 ms per Messages body, 96 ms per chat body."""
from __future__ import annotations

import threading
import time

import httpx
import orjson
import pytest

from tests.gateway import seed
from tests.test_event_loop_blocking import LoopLag, assert_loop_free
from upgate.services import accounts
from upgate.store import connection as store

pytestmark = pytest.mark.timeout(300)

N_MESSAGES, N_TOOLS = 90_000, 20_000


def _turns(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(n)]


def messages_body(n: int = N_MESSAGES) -> bytes:
    return orjson.dumps({"model": "mock/chat-1", "max_tokens": 16, "messages": _turns(n - 1) + _turns(1)})


def tools_body(n: int = N_TOOLS) -> bytes:
    tools = [{"name": f"t{i}", "input_schema": {"type": "object"}} for i in range(n)]
    return orjson.dumps({"model": "mock/chat-1", "max_tokens": 16, "tools": tools,
                         "messages": [{"role": "user", "content": "x"}]})


def chat_body(n: int = N_MESSAGES) -> bytes:
    return orjson.dumps({"model": "mock/chat-1", "max_tokens": 16, "messages": _turns(n - 1) + _turns(1)})


class HealthPoller:
    """GET /healthz in a loop on its own thread; `worst`: the longest answer (seconds)."""

    def __init__(self, node):
        self.node, self.stop, self.worst, self.times = node, False, 0.0, []

    def _run(self) -> None:
        with httpx.Client(base_url=self.node.url, timeout=30) as c:
            while not self.stop:
                t = time.monotonic()
                assert c.get("/healthz").status_code == 200
                self.times.append(time.monotonic() - t)
                time.sleep(0.005)

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop = True
        self.thread.join(30)
        self.worst = max(self.times)
        print(f"/healthz under the bodies: {len(self.times)} answers, longest {self.worst * 1000:.0f} ms, "
              f"median {sorted(self.times)[len(self.times) // 2] * 1000:.1f} ms")


def _post(node, path: str, body: bytes, key: str) -> int:
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}
    return httpx.post(node.base + path, content=body, headers=headers, timeout=120).status_code


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_large_messages_chat_and_tools_bodies_hold_no_loop(node, redis_url):
    broke, account, _ = seed(redis_url, balance="0", rpm=600)
    accounts.set_free_quota(store.connect_sync(redis_url), account, 0)
    funded, _, _ = seed(redis_url, balance="100000000", rpm=600)
    big, tools, chat = messages_body(), tools_body(), chat_body()
    assert len(big) > 2_000_000 and len(chat) > 2_000_000
    codes = {}
    with HealthPoller(node), LoopLag(node) as lag:
        for name, path, body, key in [
                ("messages broke", "/messages", big, broke),
                ("messages broke", "/messages", big, broke),
                ("count broke", "/messages/count_tokens", big, broke),
                ("count broke", "/messages/count_tokens", big, broke),
                ("chat broke", "/chat/completions", chat, broke),
                ("chat broke", "/chat/completions", chat, broke),
                ("tools broke", "/messages", tools, broke),
                ("tools count", "/messages/count_tokens", tools, funded),
                ("messages funded", "/messages", big, funded),
                ("chat funded", "/chat/completions", chat, funded)]:
            codes.setdefault(name, []).append(_post(node, path, body, key))
    assert codes == {"messages broke": [402, 402], "count broke": [200, 200], "chat broke": [402, 402],
                     "tools broke": [402], "tools count": [200], "messages funded": [200],
                     "chat funded": [200]}, codes
    assert_loop_free(lag)


def test_count_tokens_of_a_large_body_answers_the_same_estimate(node, redis_url):
    """Off the loop or on it, the estimate is the one the hold is sized by."""
    key, _, _ = seed(redis_url, balance="1000", rpm=600)
    small = orjson.dumps({"model": "mock/chat-1", "messages": _turns(3)})
    h = {"x-api-key": key, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}
    r_small = httpx.post(node.base + "/messages/count_tokens", content=small, headers=h, timeout=30)
    r_big = httpx.post(node.base + "/messages/count_tokens", content=messages_body(), headers=h, timeout=60)
    assert r_small.json()["input_tokens"] == 3 * 5  # 4 a message + 1 a character
    assert r_big.json()["input_tokens"] == N_MESSAGES * 5
