"""Whole reconcile passes against the GARM double, measured: shared by the pass tests.

``client`` and ``passes`` are fixtures (``tests/unit/conftest.py``): a client logged in
to a GARM with the configurator's provider and org registered, and ``Passes`` over it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from garm.client import GarmClient
from garm.recording import SimulatedGarm
from garm.refusals import Refusals
from scalesets.actions import Observed
from scalesets.planner import YOUNGEST_DELETE
from scalesets.reconciler import Outcome, reconcile
from scalesets.spec import Desired, ScalesetSpec, Settings
from tests.clock import FakeClock
from tests.garm_double import GarmDouble

PROVIDER = "garm-configurator-0"
SETTINGS = Settings()


def rehearse(
    client: GarmClient,
    desired: Desired,
    now: datetime,
    settings: Settings,
    memory: Refusals | None = None,
    *,
    budget: float | None = None,
    observed: Observed | None = None,
) -> Outcome:
    """The pass over GARM read for real and written to in imagination, as ``plan`` runs it."""
    garm = SimulatedGarm(client, now)
    return reconcile(garm, desired, now, settings, budget=budget, observed=observed, memory=memory)


class Passes:
    """Runs passes and measures each one's requests on the double.

    What GARM refused is kept from pass to pass, as the charm keeps it in its peer
    relation (``memory``); a test may hand a pass another.
    """

    def __init__(self, garm: GarmDouble, client: GarmClient, clock: FakeClock):
        self.garm, self.client, self.clock = garm, client, clock
        self.memory = Refusals()

    def run(
        self, *specs: ScalesetSpec, settings: Settings = SETTINGS, memory: Refusals | None = None
    ) -> Outcome:
        start = len(self.garm.requests)
        outcome = reconcile(
            self.client,
            Desired(tuple(specs)),
            self.clock.now,
            settings,
            memory=self.memory if memory is None else memory,
        )
        self.memory = outcome.memory
        self.last = [r for r in self.garm.requests[start:] if r.path != "/auth/login"]
        self.outcome = outcome
        return outcome

    def later(self, delta: timedelta = YOUNGEST_DELETE) -> None:
        """Time passes as the reconcile timer sees it, GARM's workers ticking meanwhile."""
        self.clock.advance(delta)
        self.garm.tick()

    @property
    def reads(self) -> int:
        return sum(r.method == "GET" for r in self.last)

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.last if r.method != "GET"]
