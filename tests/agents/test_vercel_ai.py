"""The Vercel AI SDK's default OpenAI provider, `openai(id)` (`ai` and `@ai-sdk/openai` from npm
at the versions tests/agents/clients.json pins), which calls POST /v1/responses: generateText,
streamText and a refused key, run by node against a node with the Responses API on."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import orjson

from tests.agents.conftest import cost_micro, settled
from tests.handlers.test_proxy import wallet

SCRIPT = Path(__file__).with_name("vercel_ai.mjs")


def test_openai_default_provider(npm_prefix, demo_node, account, redis_url):
    key, account_id = account
    before = wallet(redis_url, account_id)
    done = subprocess.run([shutil.which("node"), str(SCRIPT), str(npm_prefix / "node_modules"), demo_node.base,
                           key, "mock/chat-1"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out = orjson.loads(done.stdout)
    assert out["text"] == out["streamed"] == "tok0 tok1 tok2 tok3 tok4 "
    assert out["usage"] == {"input": 5, "output": 5} and out["streamUsage"] == 5
    assert out["error"] == {"status": 401, "name": "AI_APICallError"}
    lost, recs = settled(redis_url, account_id, before)
    assert len(recs) == 2 and lost == cost_micro(recs)
    # it was the Responses route that served them
    metrics = httpx.get(demo_node.url + "/metrics").text
    assert 'upgate_requests_total{code="",route="/v1/responses",status="200"} 2.0' in metrics
