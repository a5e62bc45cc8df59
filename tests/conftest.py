"""Shared fixtures: a GARM double on loopback, driven by a clock the test controls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clock import FakeClock
from tests.garm_double import GarmDouble
from tests.wire import T0


@pytest.fixture(scope="session")
def _garm_server() -> Iterator[tuple[GarmDouble, FakeClock]]:
    clock = FakeClock()
    double = GarmDouble(clock=clock).start()
    yield double, clock
    double.stop()


@pytest.fixture
def clock(_garm_server: tuple[GarmDouble, FakeClock]) -> FakeClock:
    _, clock = _garm_server
    clock.now = T0
    return clock


@pytest.fixture
def garm(_garm_server: tuple[GarmDouble, FakeClock], clock: FakeClock) -> Iterator[GarmDouble]:
    """A fresh GARM double; a test that calls a route GARM does not have fails."""
    double, _ = _garm_server
    double.reset()
    yield double
    assert double.unexpected == [], f"requests GARM has no route for: {double.unexpected}"
