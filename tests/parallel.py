"""How the suite runs in parallel (pytest-xdist; see docs/testing.md, "Running in parallel").

- How many workers: twice the cores for the whole suite or a folder (most tests wait on
  sockets, servers and subprocesses, so two per core keep both cores busy); none when the
  command names files or tests, where starting workers would cost more than it saves.
  `-n N` on the command line, or PYTEST_XDIST_AUTO_NUM_WORKERS=N, says otherwise.
- What stays together (`--dist loadgroup`): every test is its own unit of work, except those
  that use a module- or class-scoped fixture (a browser, a TLS Redis, a process shared by a
  module): their module goes to one worker as a group, so the fixture starts once.
- What runs alone: a test marked `serial` (it measures time: a loop's longest stall, a timing
  side channel, a load test's bounded run) waits until no other test runs in any worker, and
  no test starts until it ends (a writers-first lock of two flock(2) files in a directory the
  controller makes for the run). Its limits stay as they are.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile

import pytest

WORKERS_PER_CORE = 2
MAX_WORKERS = 8


def pytest_configure(config):
    lock_dir = getattr(config, "workerinput", {}).get("upgate_lock_dir")
    if lock_dir:
        config.pluginmanager.register(_RunAlone(lock_dir), "upgate-run-alone")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    names_tests = config.args and not any(os.path.isdir(a.split("::")[0]) for a in config.args)
    if names_tests:
        return 0
    return min(MAX_WORKERS, WORKERS_PER_CORE * len(os.sched_getaffinity(0)))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """On the controller, for each worker it starts: where the run's lock files are."""
    config = node.config
    if not getattr(config, "upgate_lock_dir", None):
        config.upgate_lock_dir = tempfile.mkdtemp(prefix="upgate-serial-")
    node.workerinput["upgate_lock_dir"] = config.upgate_lock_dir


def pytest_unconfigure(config):
    if getattr(config, "upgate_lock_dir", None):
        shutil.rmtree(config.upgate_lock_dir, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        defs = getattr(item, "_fixtureinfo", None)
        scopes = {d[-1].scope for d in defs.name2fixturedefs.values() if d} if defs else set()
        if scopes & {"module", "class"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


class _RunAlone:
    """A worker's side of the lock: every test holds it shared, a `serial` test exclusive.
    Whoever wants it exclusive first takes the gate, so no new test starts while it waits."""

    def __init__(self, lock_dir: str):
        self.gate = open(os.path.join(lock_dir, "gate"), "a+")
        self.tests = open(os.path.join(lock_dir, "tests"), "a+")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        alone = item.get_closest_marker("serial") is not None
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        fcntl.flock(self.tests, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.tests, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(self.gate, fcntl.LOCK_UN)
