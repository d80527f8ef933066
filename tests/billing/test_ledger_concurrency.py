"""Concurrency that would break a non-atomic design: parallel admits over several connections
and several ledgers ("nodes"), each run on one private redis-server and on the local 3-master
Redis Cluster."""
from __future__ import annotations

import pytest

from tests import ledger_kit as kit
from upgate.store import connection as store


@pytest.fixture(params=["redis_url", pytest.param("cluster_url", marks=pytest.mark.cluster)])
def url_and_sync(request):
    """(store URL, a blocking client of it): one private Redis, or the Cluster."""
    url = request.getfixturevalue(request.param)
    client = store.connect_sync(url)
    yield url, client
    client.close()


def test_admit_run_twice_with_one_hold_id_reserves_once(url_and_sync):
    kit.check_retried_admit_is_idempotent(*url_and_sync)


def test_200_parallel_admits_against_a_wallet_for_exactly_n(url_and_sync):
    kit.check_parallel_wallet(*url_and_sync)


def test_parallel_requests_never_pass_the_monthly_limit(url_and_sync):
    kit.check_parallel_monthly_limit(*url_and_sync)


def test_exactly_10_of_50_parallel_streams(url_and_sync):
    kit.check_parallel_streams(*url_and_sync)


def test_parallel_burst_admits_exactly_rpm(url_and_sync):
    kit.check_parallel_rpm(*url_and_sync)


def test_no_60s_window_holds_more_than_rpm(url_and_sync):
    kit.check_sliding_window(*url_and_sync)
