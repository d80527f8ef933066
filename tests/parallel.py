"""How the suite runs in parallel (pytest-xdist; see docs/testing.md, "Running in parallel").

- How many workers: one per core for the whole suite or a folder (two per core finished
  sooner but starved browsers and timers into flakes), less what the
  machine is already busy with (a developer's machine shared with other runs), and none when
  that leaves fewer than two or when the command names files or tests, where starting
  workers would cost more than it saves.
  `-n N` on the command line, or PYTEST_XDIST_AUTO_NUM_WORKERS=N, says otherwise.
- What stays together (`--dist loadgroup`): every test is its own unit of work, except those
  that use a module- or class-scoped fixture (a browser, a TLS Redis, a process shared by a
  module): their module goes to one worker as a group, so the fixture starts once.
- Where the CPU goes: `--cpu-by-module=N` prints the N modules that cost the most CPU (the
  worker's threads, where the nodes and the mock run, and its children reaped meanwhile:
  `upgate serve` processes, chromium; not the session's redis-servers), beside
  `--durations`' wall times, which on a shared machine say as much about the neighbours.
- What runs alone: a test marked `serial` (it measures time: a loop's longest stall, a timing
  side channel, a load test's bounded run) waits until no other test runs in any worker, and
  no test starts until it ends (a writers-first lock of two flock(2) files in the run's
  temporary directory). Its limits stay as they are.
"""
from __future__ import annotations

import collections
import fcntl
import os
import resource
import time

import pytest

WORKERS_PER_CORE = 1  # two a core finished sooner but starved browsers and timers into flakes
MAX_WORKERS = 8


def pytest_addoption(parser):
    parser.addoption("--cpu-by-module", type=int, default=0, metavar="N",
                     help="list the N test modules that cost the most CPU time (tests/parallel.py)")


def pytest_configure(config):
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.pluginmanager.register(_RunAlone(workerinput["upgate_run_dir"]), "upgate-run-alone")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    names_tests = config.args and not any(os.path.isdir(a.split("::")[0]) for a in config.args)
    if names_tests:
        return 0
    n = min(MAX_WORKERS, round(WORKERS_PER_CORE * len(os.sched_getaffinity(0)) - _busy()))
    return n if n >= 2 else 0


def _busy() -> float:
    """What else the machine is running, in cores: the lesser of the last minute's load and
    the processes runnable right now but this one (the load lags: just after a `pip install`
    it still counts the install)."""
    with open("/proc/loadavg") as f:
        fields = f.read().split()
    return max(0.0, min(float(fields[0]), int(fields[3].split("/")[0]) - 1))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """On the controller, for each worker it starts: where the run's lock files are (under the
    run's base temporary directory, which pytest cleans up with it)."""
    config = node.config
    if not hasattr(config, "upgate_run_dir"):
        config.upgate_run_dir = str(config._tmp_path_factory.mktemp("run-alone", numbered=False))
    node.workerinput["upgate_run_dir"] = config.upgate_run_dir


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

    def __init__(self, run_dir: str):
        self.gate = open(os.path.join(run_dir, "gate"), "a+")
        self.tests = open(os.path.join(run_dir, "tests"), "a+")

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


def _cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_AT] = _cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and _CPU_AT in item.stash:
        outcome.get_result().user_properties.append(("cpu_s", _cpu() - item.stash[_CPU_AT]))


_CPU_AT = pytest.StashKey[float]()
_CPU_BY_MODULE: collections.Counter = collections.Counter()


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == "cpu_s":
                _CPU_BY_MODULE[report.nodeid.split("::")[0]] += value


def pytest_terminal_summary(terminalreporter, config):
    top = config.getoption("cpu_by_module")
    if top and _CPU_BY_MODULE:
        terminalreporter.write_sep("=", f"CPU time by module (total {sum(_CPU_BY_MODULE.values()):.0f} s)")
        for module, cpu in _CPU_BY_MODULE.most_common(top):
            terminalreporter.write_line(f"{cpu:8.1f}s  {module}")
