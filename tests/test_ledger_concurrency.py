"""Concurrency that would break a non-atomic design, on one private redis-server: parallel
admits over several connections and several ledgers ("nodes"). The same suite runs on the local
Redis Cluster in tests/test_ledger_cluster.py."""
from __future__ import annotations

from tests import ledger_kit as kit


def test_200_parallel_admits_against_a_wallet_for_exactly_n(redis_url, r):
    kit.check_parallel_wallet(redis_url, r)


def test_parallel_requests_never_pass_the_monthly_limit(redis_url, r):
    kit.check_parallel_monthly_limit(redis_url, r)


def test_exactly_10_of_50_parallel_streams(redis_url, r):
    kit.check_parallel_streams(redis_url, r)


def test_parallel_burst_admits_exactly_rpm(redis_url, r):
    kit.check_parallel_rpm(redis_url, r)


def test_no_60s_window_holds_more_than_rpm(redis_url, r):
    kit.check_sliding_window(redis_url, r)
