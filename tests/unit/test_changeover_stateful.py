"""Whole changeovers as random stories against the GARM double, checked at every step.

Hypothesis drives label changes (flip-flops included), logical names coming and going,
runners booting, taking jobs and finishing, time passing, GARM's worker ticking, and
faults between any two calls (error answers, dropped connections before and after GARM
acted, GARM's delete-200-but-kept). After every step the design's invariants are checked
on the double's ground truth, and every story must end converged.

``GARM_SOAK_STEPS`` / ``GARM_SOAK_EXAMPLES`` make the same machine run long (``tox -e soak``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import timedelta
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from garm_client import GarmClient
from naming import normalise_labels
from planner import Action, CreateScaleset, RemoveInstance, UpdateScaleset
from reconciler import Outcome, preview, reconcile
from spec import Desired, ScalesetSpec, Settings
from tests.clock import FakeClock
from tests.garm_double import GarmDouble
from tests.soak import soak_settings
from tests.wire import T0

PROVIDER = "garm-configurator-0"
SETTINGS = Settings(handover_timeout=timedelta(minutes=30), drain_deadline=timedelta(hours=7))
LOGICAL = ("ci", "big")
LABEL_SETS = (("linux",), ("linux", "x64"), ("linux", "arm64"), ("Linux", "X64", "gpu"))
READS = (("GET", r"/scalesets/?"), ("GET", r"/instances/?"), ("GET", r"/providers/?"))
FAULTS = ("500", "400", "drop", "drop_after")
# Passes a fault-free GARM needs to finish any changeover, at worst: create the
# replacement, hand over once it is warm, force-remove stuck runners past the deadline,
# delete, and see it gone.
CONVERGE_WITHIN = 5
# What the stories exercised, summed over all examples; the test asserts each happened.
COVERAGE: Counter[str] = Counter()


class Changeover(RuleBasedStateMachine):
    """One GARM, two logical scalesets, and everything that can happen to them."""

    def __init__(self, garm: GarmDouble, clock: FakeClock):
        super().__init__()
        self.garm, self.clock = garm, clock
        assert garm.unexpected == [], f"routes GARM does not have: {garm.unexpected}"
        garm.reset()
        clock.now = T0
        garm.add_provider(PROVIDER)
        garm.add_org("example-org")
        self.client = GarmClient(garm.url, garm.username, garm.password, timeout=(1, 1))
        self.labels: dict[str, tuple[str, ...]] = {"ci": ("linux", "x64"), "big": ("linux",)}
        self.served: dict[str, set[str]] = {}
        self.checked_removals = 0
        self.last: Outcome | None = None

    # --- what the world does ------------------------------------------------------------

    @rule(logical=st.sampled_from(LOGICAL), labels=st.sampled_from(LABEL_SETS))
    def change_labels(self, logical, labels):
        if labels != self.labels.get(logical) and self.has_generation(logical, labels):
            COVERAGE["flip-flops"] += 1
        self.labels[logical] = labels

    @rule(logical=st.sampled_from(LOGICAL))
    def unpublish(self, logical):
        self.labels.pop(logical, None)
        self.served.pop(logical, None)

    @rule()
    def tick(self):
        self.garm.tick()

    @rule(logical=st.sampled_from(LOGICAL))
    def job_arrives(self, logical):
        """GitHub hands a job to an enabled scaleset serving ``logical``: a busy runner."""
        serving = self.serving(logical)
        if serving:
            self.garm.add_runner(serving[0]["id"], runner_status="active")

    @rule(data=st.data())
    def take_job(self, data):
        idle = [i for i in self.garm.instances() if i.get("runner_status") == "idle"]
        if idle:
            self.garm.start_job(data.draw(st.sampled_from(idle))["name"])

    @rule(logical=st.sampled_from(LOGICAL))
    def runner_gets_stuck(self, logical):
        """A runner whose job never ends: only the drain deadline can free its scaleset."""
        serving = self.serving(logical)
        if serving:
            name = self.garm.add_runner(serving[0]["id"], runner_status="active")
            self.garm.set_runner(name, status="error", runner_status="failed")

    @rule(data=st.data())
    def finish_job(self, data):
        busy = [i for i in self.garm.instances() if i.get("runner_status") == "active"]
        if busy:
            self.garm.finish_job(data.draw(st.sampled_from(busy))["name"])

    @rule(minutes=st.sampled_from([1, 20, 45, 60, 3 * 60, 8 * 60]))
    def time_passes(self, minutes):
        self.clock.advance(timedelta(minutes=minutes))

    @rule(keep=st.booleans())
    def github_delete_fails(self, keep):
        self.garm.delete_keeps_record = keep

    @rule()
    def reconcile_pass(self):
        self.run_pass()

    @rule(data=st.data(), kind=st.sampled_from(FAULTS))
    def faulty_pass(self, data, kind):
        """A pass in which GARM fails one of the calls it is about to get.

        The call is picked from what the planner will ask first, so the fault always
        lands; with nothing to write, one of the observing reads fails instead.
        """
        planned = preview(self.client, self.desired(), self.clock.now, SETTINGS).actions
        if planned:
            method, path = _route_of(data.draw(st.sampled_from(planned)))
            COVERAGE[f"faulted {method}"] += 1
        else:
            method, path = data.draw(st.sampled_from(READS))
        if kind in ("500", "400"):
            self.garm.inject(method, path, status=int(kind))
        else:
            self.garm.inject(method, path, drop=kind == "drop", drop_after=kind == "drop_after")
        self.run_pass()

    # --- what must always hold ----------------------------------------------------------

    @invariant()
    def no_label_gap(self):
        """Once served, a label still asked for is served by an enabled scaleset."""
        for logical, labels in self.labels.items():
            wanted = set(normalise_labels((*labels, logical)))
            now = self.served_labels(logical)
            before = self.served.get(logical)
            if before is not None:
                lost = (before & wanted) - now
                assert not lost, f"{logical}: {sorted(lost)} unserved"
            if logical in now:
                self.served[logical] = now

    @invariant()
    def count_the_step(self):
        COVERAGE["steps checked"] += 1

    @invariant()
    def never_two_scalesets_of_one_generation(self):
        """A flip-flop re-enables the old generation; nothing is ever built twice."""
        seen: set[tuple[str, ...]] = set()
        for scaleset in self.garm.scalesets():
            labels = tuple(sorted(t["name"].lower() for t in scaleset.get("tags", [])))
            assert labels not in seen, f"two scalesets serve {labels}"
            seen.add(labels)

    @invariant()
    def no_runner_removed_before_its_deadline(self):
        for name, scaleset_id, at, _ in self.garm.removals[self.checked_removals :]:
            since = self.garm.disabled_since.get(scaleset_id)
            assert since is not None, f"runner {name} removed from an enabled scaleset"
            assert at - since >= SETTINGS.drain_deadline, f"runner {name} removed early"
        self.checked_removals = len(self.garm.removals)

    def teardown(self):
        """Every story ends converged once faults stop and runners finish."""
        try:
            self.settle()
        finally:
            self.client.close()

    # --- helpers ------------------------------------------------------------------------

    def run_pass(self) -> None:
        start = len(self.garm.requests)
        self.last = reconcile(self.client, self.desired(), self.clock.now, SETTINGS)
        self.garm.clear_faults()
        for request in self.garm.requests[start:]:
            if request.method == "DELETE" and request.path.startswith("/instances/"):
                COVERAGE["force removals"] += 1

    def desired(self) -> Desired:
        return Desired(
            tuple(
                ScalesetSpec(
                    source=f"garm-configurator/{i}",
                    name=logical,
                    entity_kind="organization",
                    entity_name="example-org",
                    provider_name=PROVIDER,
                    image="image-uuid",
                    flavor="m1.small",
                    os_arch="amd64",
                    max_runners=3,
                    min_idle_runners=1 if logical == "big" else 0,
                    labels=labels,
                )
                for i, (logical, labels) in enumerate(sorted(self.labels.items()))
            )
        )

    def serving(self, logical: str) -> list[dict]:
        """The enabled scalesets carrying ``logical`` as a label."""
        return [
            s
            for s in self.garm.scalesets()
            if s.get("enabled") and logical in {t["name"] for t in s.get("tags", [])}
        ]

    def has_generation(self, logical: str, labels: tuple[str, ...]) -> bool:
        wanted = set(normalise_labels((*labels, logical)))
        return any(
            {t["name"].lower() for t in s.get("tags", [])} == wanted for s in self.garm.scalesets()
        )

    def served_labels(self, logical: str) -> set[str]:
        """Labels of the enabled scalesets that carry ``logical`` as a label."""
        served: set[str] = set()
        for scaleset in self.garm.scalesets():
            tags = {t["name"].lower() for t in scaleset.get("tags", [])}
            if scaleset.get("enabled") and logical in tags:
                served |= tags
        return served

    def settle(self):
        """Stop faults, let every job finish and time pass, then require convergence."""
        self.garm.clear_faults()
        self.garm.delete_keeps_record = False
        for instance in self.garm.instances():
            if instance.get("runner_status") == "active":
                self.garm.finish_job(instance["name"])
        outcome = None
        for _ in range(CONVERGE_WITHIN):
            self.garm.tick()
            self.garm.tick()
            # Runners stuck in error never finish: each pass waits out every deadline.
            self.clock.advance(SETTINGS.drain_deadline + SETTINGS.handover_timeout)
            self.run_pass()
            outcome = self.last
            assert outcome is not None and outcome.ok, outcome
            self.no_label_gap()
            self.no_runner_removed_before_its_deadline()
            if not outcome.done and not outcome.progress:
                break
        else:
            raise AssertionError(f"not converged after {CONVERGE_WITHIN} passes: {outcome}")
        writes_before = len(self.garm.writes())
        reconcile(self.client, self.desired(), self.clock.now, SETTINGS)
        assert len(self.garm.writes()) == writes_before, "a converged pass wrote"
        live = self.garm.scalesets()
        assert len(live) == len(self.labels), live
        for logical, labels in self.labels.items():
            (mine,) = [s for s in live if logical in {t["name"] for t in s.get("tags", [])}]
            assert mine.get("enabled") is True
            assert {t["name"].lower() for t in mine["tags"]} == set(
                normalise_labels((*labels, logical))
            )


def test_changeovers_keep_every_invariant(garm: GarmDouble, clock: FakeClock):
    class OnThisGarm(Changeover):
        def __init__(self):
            super().__init__(garm, clock)

    COVERAGE.clear()
    run_state_machine_as_test(OnThisGarm, settings=soak_settings(50, 60))
    # The stories must have reached what the invariants guard, or they prove nothing.
    for seen in ("faulted POST", "faulted PUT", "faulted DELETE", "force removals", "flip-flops"):
        assert COVERAGE[seen] > 0, COVERAGE
    report = os.environ.get("GARM_SOAK_REPORT")
    if report:
        Path(report).write_text(json.dumps(dict(sorted(COVERAGE.items())), indent=2) + "\n")


def _route_of(action: Action) -> tuple[str, str]:
    """The GARM call an action makes, as a fault pattern for the double."""
    if isinstance(action, CreateScaleset):
        return "POST", r"/organizations/[^/]+/scalesets/?"
    if isinstance(action, UpdateScaleset):
        return "PUT", rf"/scalesets/{action.scaleset_id}/?"
    if isinstance(action, RemoveInstance):
        return "DELETE", rf"/instances/{action.instance_name}/?"
    return "DELETE", rf"/scalesets/{action.scaleset_id}/?"
