"""Fixtures for the network tests: namespaces and peers that are always removed, measurements
printed in the summary, and a skip with its reason where namespaces cannot be made."""
import shutil
import tempfile

import pytest

import netns
from procs import Peer

_why_not = None


def pytest_configure(config):
    global _why_not
    _why_not = netns.unavailable()
    config.addinivalue_line("markers", "netns: needs root and network namespaces")


def pytest_collection_modifyitems(config, items):
    if _why_not:
        skip = pytest.mark.skip(reason=f"network namespace tests cannot run here: {_why_not}")
        for item in items:
            if "netns" in item.keywords:
                item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call_failed = rep.failed


_measured = []


@pytest.fixture
def record(request):
    """record(text): a measurement, printed in the run's summary (faults injected, counts, RSS, ...)."""
    return lambda text: _measured.append(f"{request.node.name}: {text}")


def pytest_terminal_summary(terminalreporter):
    if _measured:
        terminalreporter.section("measurements")
        for line in _measured:
            terminalreporter.write_line(line)
    if _why_not:
        terminalreporter.section("skipped")
        terminalreporter.write_line(f"network namespace tests did not run: {_why_not}")


@pytest.fixture
def topology():
    """topology(**impairments) -> a fresh A | M | B; all of them are removed after the test."""
    made = []

    def make(**impairments):
        t = netns.Topology(**impairments)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


@pytest.fixture
def spawn(request, topology):  # after topology: peers stop before their namespaces go
    """spawn(role, name, netns=None, **options) -> a running Peer, stopped after the test (its log is
    printed when the test failed; a survivor that does not exit cleanly fails the test)."""
    started = []
    uds = tempfile.mkdtemp(prefix="hmc-net-")

    def make(role, name, netns=None, env=None, **options):
        options.setdefault("uds_dir", uds)
        p = Peer(role, name, netns=netns, env=env, **options)
        started.append(p)
        return p

    make.uds_dir = uds
    yield make
    failed = getattr(request.node, "rep_call_failed", True)
    unclean = []
    for p in started:
        code = p.stop()
        if failed:
            print(p.tail(60))
        elif code != 0 and not p.killed:
            unclean.append(f"{p.name} exited with {code}\n{p.tail(20)}")
    shutil.rmtree(uds, ignore_errors=True)
    if unclean:
        pytest.fail("a survivor did not close cleanly (crash, hang or sanitizer report):\n" + "\n".join(unclean))
