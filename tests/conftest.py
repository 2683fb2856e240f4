"""Shared pytest fixtures: the RTL simulators and a build cache shared by all tests."""

import os
from pathlib import Path

import pytest

from superfabric.tb.runner import SIMULATORS, SimulatorMissing, find_simulator

#: Simulator builds are cached here across tests and sessions (one per
#: configuration and HDL version), so each configuration compiles once.
BUILD_ROOT = Path(__file__).resolve().parent.parent / "build" / "test"


def require_simulator(sim: str) -> None:
    """Skip when ``sim`` is missing, but fail under CI, which must prove both ran."""
    try:
        find_simulator(sim)
    except SimulatorMissing as e:
        if os.environ.get("CI"):
            pytest.fail(f"{sim} is required in CI: {e}")
        pytest.skip(str(e))


@pytest.fixture(params=SIMULATORS)
def sim(request):
    """Each RTL simulator in turn."""
    require_simulator(request.param)
    return request.param


@pytest.fixture
def build_root():
    """Root of the shared simulator build cache."""
    return BUILD_ROOT
