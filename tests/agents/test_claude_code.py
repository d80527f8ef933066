"""Claude Code itself (the npm package, tests/agents/clients.json) against a running node with
the demo's catalog and the mock provider, configured only as `upgate demo` prints it
(ANTHROPIC_BASE_URL = the root, ANTHROPIC_AUTH_TOKEN = the key). Its default model name resolves
by the demo's alias pattern to the mock's Messages API (passed through as sent); a catalog id
of the openai dialect takes the translation to chat completions. Each run answers, runs a tool
loop the mock drives (a Bash call of `echo`, then a text answer quoting its output), and moves
the wallet by exactly what the request records say was charged."""
from __future__ import annotations

import orjson
import pytest

from tests.agents import npm_clients
from tests.agents.conftest import agent_env, configure, cost_micro, run, settled
from tests.anthropic.test_messages_sdk import last_upstream
from tests.handlers.test_proxy import wallet


def claude(prefix, node, key, tmp_path, prompt: str, *flags: str, model: str | None = None) -> dict:
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "project").mkdir(exist_ok=True)
    extra = {"ANTHROPIC_BASE_URL": node.url, "ANTHROPIC_AUTH_TOKEN": key}
    if model:
        extra["ANTHROPIC_MODEL"] = model
    done = run([npm_clients.claude(prefix), "-p", prompt, "--output-format", "json", *flags],
               agent_env(tmp_path / "home", **extra), tmp_path / "project")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    out = orjson.loads(done.stdout)
    assert out["is_error"] is False, out
    return out


@pytest.mark.parametrize("model, answered", [(None, "mock/claude-1"), ("mock/chat-1", "mock/chat-1")])
def test_claude_code_answers(npm_prefix, demo_node, account, redis_url, mock, tmp_path, model, answered):
    key, account_id = account
    before = wallet(redis_url, account_id)
    out = claude(npm_prefix, demo_node, key, tmp_path, "say hi", model=model)
    assert out["result"].strip() == "tok0 tok1 tok2 tok3 tok4"
    lost, recs = settled(redis_url, account_id, before)
    assert [r["answered_model"] for r in recs] == [answered] and recs[0]["status"] == 200
    assert lost == cost_micro(recs) > 0
    sent = last_upstream(mock)
    if model is None:  # its own default name, e.g. claude-opus-5-5, by the pattern "claude-opus-*"
        asked = sent["last_body"]["model"]
        assert asked == "mock-claude-1" and sent["last_headers"]["Anthropic-Beta"].startswith("claude-code-")
        assert "claude-opus" in orjson.dumps(out["modelUsage"]).decode()


@pytest.mark.parametrize("model", [None, "mock/chat-1"])
def test_claude_code_runs_a_tool_loop(npm_prefix, demo_node, account, redis_url, mock, tmp_path, model):
    configure(mock, tool_loop=True)
    key, account_id = account
    before = wallet(redis_url, account_id)
    out = claude(npm_prefix, demo_node, key, tmp_path, "print the marker", "--allowedTools", "Bash", model=model)
    # the mock asked for `echo upgate-tool-loop` in Bash; Claude Code ran it and sent the output back
    assert out["result"].strip() == "The tool said: upgate-tool-loop" and out["num_turns"] == 2
    lost, recs = settled(redis_url, account_id, before)
    assert len(recs) == 2 and {r["status"] for r in recs} == {200}
    assert lost == cost_micro(recs)
