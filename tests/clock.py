"""A clock a test or the demo moves by hand, shared by the GARM double and the planner."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.wire import T0


class FakeClock:
    """Callable like ``datetime.now``; ``advance`` is the only way time passes."""

    def __init__(self, start: datetime = T0):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> datetime:
        self.now += delta
        return self.now
