"""Shared fixtures: every test that takes ``mode`` runs once per endpoint mode, and every test
has a time limit (pytest-timeout's when installed, else a watchdog that prints every thread's
stack and ends the session)."""

import faulthandler
import importlib.util
import signal
import sys

import pytest

import pto

# The Ctrl-C tests press Ctrl-C as a terminal does. Python installs its SIGINT handler only when
# it starts with SIGINT at its default; a background job of a non-interactive shell starts with
# it ignored, and then no Ctrl-C reaches Python at all. Restore the handler a terminal's Python
# has, so the tests measure pto, not how the suite was launched.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

MODES = ["in-process", "child-process"]

#: Seconds a test may take; far above what any needs (the slowest takes ~2 s).
TEST_TIMEOUT = 120


def pytest_collection_modifyitems(items):
    if importlib.util.find_spec("pytest_timeout") is not None:
        for item in items:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


@pytest.fixture(autouse=True)
def _watchdog():
    if importlib.util.find_spec("pytest_timeout") is not None:
        yield
        return
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def worker(mode):
    """A two-chip Worker with two sub workers, not yet initialised, with ``elementwise_add``
    and ``vector_example`` registered (handles as ``worker.add`` / ``worker.vec``)."""
    w = pto.Worker(level=3, chips=2, sub_workers=2, mode=mode)
    w.add = w.register(pto.ChipCallable("elementwise_add"))
    w.vec = w.register(pto.ChipCallable("vector_example"))
    yield w
    w.close()
