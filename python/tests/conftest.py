"""Shared fixtures: every test that takes ``mode`` runs once per endpoint mode."""

import pytest

import pto

MODES = ["in-process", "child-process"]


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def worker(mode):
    """An initialised two-chip Worker with one sub worker, and ``elementwise_add`` and
    ``vector_example`` registered (handles as ``worker.add`` / ``worker.vec``)."""
    w = pto.Worker(level=3, chips=2, sub_workers=2, mode=mode)
    w.add = w.register(pto.ChipCallable("elementwise_add"))
    w.vec = w.register(pto.ChipCallable("vector_example"))
    yield w
    w.close()
