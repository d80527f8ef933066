"""No event is dropped silently: 1,500 top-ups of one account while the receiver refuses
everything. An outbox keeps 1,000 events waiting; the mover moves the oldest beyond them to the
failed list (reason `overflow`, logged and counted), the rest are delivered when the receiver is
back, and `webhook resend --all` delivers the overflowed ones: every event arrives."""
from __future__ import annotations

import json

from click.testing import CliRunner

from admin_cli.main import cli
from tests.load_kit import wait_for
from tests.webhooks.test_webhooks import engines, fast, new_account  # noqa: F401 - engines is a fixture
from upgate.services import transactions
from upgate.store import connection as store, keyspace

N = 1500


def test_a_flood_during_an_outage_is_delivered_or_failed_then_resent(redis_url, receiver, engines):  # noqa: F811
    client = store.connect_sync(redis_url)
    acct = new_account(client)
    receiver.status = 500  # the receiver is down for the whole flood
    engine = engines(fast(redis_url, receiver.url))
    made = [transactions.topup(client, acct, "1", ref=f"flood-{i}")["transaction"]["id"] for i in range(N)]
    wait_for(lambda: engine.count("overflow") >= N - 1000, 60, "the overflow moved to the failed list")
    res = CliRunner().invoke(cli, ["webhook", "failed", "--limit", "1000", "--json"],
                             env={"UPGATE_REDIS_URL": redis_url})
    failed = json.loads(res.stdout)["failed"]
    assert len(failed) == N - 1000 and {f["reason"] for f in failed} == {"overflow"}
    assert all(f["event"]["type"] == "wallet.topup" for f in failed)
    assert client.llen(keyspace.outbox(acct)) == 1000  # the newest wait, the one out among them

    def delivered() -> set[str]:
        return {e["data"]["transaction"]["id"] for e in receiver.accepted() if e["type"] == "wallet.topup"}

    receiver.status = 200  # back: the 1,000 kept are delivered in order
    wait_for(lambda: len(delivered()) >= 1000, 180, "the kept events delivered")
    overflowed = {f["event"]["data"]["transaction"]["id"] for f in failed}
    assert delivered() | overflowed == set(made)  # every event: delivered, or in the failed list
    res = CliRunner().invoke(cli, ["webhook", "resend", "--all", "--json"], env={"UPGATE_REDIS_URL": redis_url})
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["resent"]) == N - 1000
    wait_for(lambda: delivered() == set(made), 120, "the resent events delivered")
    assert client.llen(keyspace.WEBHOOK_FAILED) == 0
    assert engine.count("dropped") == 0
