"""Codex itself (the npm package, tests/agents/clients.json) against a running node with the
demo's catalog and the mock provider, configured with the provider block `upgate demo` prints
(upgate/demo.py: wire_api = "responses"). With Codex's own default model name (resolved by the
demo's `gpt-*` pattern; Codex then sends its tools in an `additional_tools` input item, a
JavaScript `exec` custom tool among them) and with a catalog id (classic function tools,
`exec_command`): each answers a prompt, runs a tool loop the mock drives, and moves the wallet
by exactly what the request records say was charged."""
from __future__ import annotations

import pytest

from tests.agents import npm_clients
from tests.agents.conftest import agent_env, configure, cost_micro, run, settled
from tests.handlers.test_proxy import wallet
from upgate.demo import codex_config


def codex(prefix, node, key, tmp_path, prompt: str, model: str | None) -> str:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (tmp_path / "project").mkdir(exist_ok=True)
    (home / ".codex" / "config.toml").write_text(codex_config(node.base, model))
    cmd = [*npm_clients.codex(prefix), "exec", "--skip-git-repo-check", prompt]
    done = run(cmd, agent_env(home, CODEX_HOME=str(home / ".codex"), UPGATE_API_KEY=key), tmp_path / "project")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout.decode().strip()


@pytest.mark.parametrize("model", [None, "mock/chat-1"])
def test_codex_answers(npm_prefix, demo_node, account, redis_url, mock, tmp_path, model):
    key, account_id = account
    before = wallet(redis_url, account_id)
    assert codex(npm_prefix, demo_node, key, tmp_path, "say hi", model) == "tok0 tok1 tok2 tok3 tok4"
    lost, recs = settled(redis_url, account_id, before)
    assert [(r["model"], r["status"]) for r in recs] == [("mock/chat-1", 200)]
    assert lost == cost_micro(recs) > 0


@pytest.mark.parametrize("model, tool", [(None, "exec"), ("mock/chat-1", "exec_command")])
def test_codex_runs_a_tool_loop(npm_prefix, demo_node, account, redis_url, mock, tmp_path, model, tool):
    configure(mock, tool_loop=True)
    key, account_id = account
    before = wallet(redis_url, account_id)
    out = codex(npm_prefix, demo_node, key, tmp_path, "print the marker", model)
    # the mock called the tool (`exec`: text("upgate-tool-loop"); exec_command: echo), Codex ran
    # it and sent its output back, and the mock answered quoting it
    assert out.startswith("The tool said:") and out.endswith("upgate-tool-loop")
    lost, recs = settled(redis_url, account_id, before)
    assert len(recs) == 2 and {r["status"] for r in recs} == {200}
    assert lost == cost_micro(recs)
