"""The TypeScript SDK (@anthropic-ai/sdk) against a running gateway, where node and the SDK are
installed: `npm install @anthropic-ai/sdk` in a directory named by UPGATE_TS_SDK_DIR. Skipped
(and said so) otherwise: the Python SDK's tests cover the same behaviour."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.anthropic.conftest import COMPLETION, PROMPT
from tests.anthropic.test_messages_sdk import charged
from tests.handlers.test_proxy import wallet

SDK_DIR = os.environ.get("UPGATE_TS_SDK_DIR", "")
SCRIPT = Path(__file__).with_name("sdk_node.cjs")

pytestmark = pytest.mark.skipif(
    not shutil.which("node") or not (Path(SDK_DIR) / "node_modules/@anthropic-ai/sdk").is_dir(),
    reason="node and @anthropic-ai/sdk (UPGATE_TS_SDK_DIR) are not installed")


@pytest.mark.parametrize("model", ["mock/chat-1", "claude-sonnet-4-5"])
def test_typescript_sdk(claude_node, redis_url, funded, model):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    run = subprocess.run(["node", str(SCRIPT), claude_node.url, key, model], capture_output=True,
                         timeout=60, env={**os.environ, "SDK_DIR": SDK_DIR})
    assert run.returncode == 0, run.stderr.decode()
    out = orjson.loads(run.stdout)
    assert out["text"] == out["streamed"] == "tok0 tok1 tok2 tok3 tok4 "
    assert out["usage"]["input_tokens"] == 5 and out["usage"]["output_tokens"] == 5
    assert out["stream_output_tokens"] == 5 and out["count"] > 0
    assert out["error"]["cls"] == "AuthenticationError" and out["error"]["status"] == 401
    assert out["error"]["type"] == "authentication_error" and out["error"]["code"] == "invalid_api_key"
    assert out["error"]["request_id"].startswith("req_")
    assert charged(redis_url, account_id, before) == 2 * (5 * PROMPT + 5 * COMPLETION)
