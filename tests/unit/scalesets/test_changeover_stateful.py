"""Whole changeovers as random stories against the GARM double, checked at every step.

Hypothesis drives label changes (flip-flops included), logical names coming and going,
the scaleset name budget lowered and raised (a short-named generation of the same key
made, then both names fitting again while the long-named one drains),
runners booting, taking jobs and finishing (some only long after the drain deadline),
runners failing, time passing from seconds to hours, GARM's worker ticking (its
5-minute consolidation against GitHub included), and faults between any two calls (error
answers, dropped connections before and after GARM acted, GARM's delete-200-but-kept).
The GARM double plays GARM's real pace: a new generation listens 4.5 s after its create,
a job ending on a retired scaleset is seen only at the next consolidation, GitHub refuses
to remove a runner whose job still runs. After every step the design's invariants are
checked on the double's ground truth and on its request log (among them: the serving
generation is never retired unasked); every story must end
settled, with time passing as the reconcile timer lets it, once the causes are gone.

``GARM_SOAK_STEPS`` / ``GARM_SOAK_EXAMPLES`` make the same machine run long (``tox -e soak``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from garm import requeue
from garm.client import GarmClient
from garm.models import parse_time
from garm.refusals import (
    FIRST_RETRY,
    LONGEST_RETRY,
    REFUSALS_BEFORE_BLOCKED,
    Refusals,
    backoff,
    believed_wait,
    digest,
    is_permanent,
    request_digest,
)
from garm.writes import Write
from juju.relation import RelationState
from juju.status import summarise
from runners.options import RunnerOptions
from runners.scripts import derive_template, install_blocks
from runners.templates import CreateTemplate, DeleteTemplate, UpdateTemplate, template_name
from scalesets.actions import (
    CreateScaleset,
    DeleteScaleset,
    Phase,
    Progress,
    RemoveInstance,
    UpdateScaleset,
    field_key,
)
from scalesets.drain import FORCE_STUCK
from scalesets.naming import normalise_labels
from scalesets.notes import Notes
from scalesets.planner import PENDING_DELETE_GRACE, YOUNGEST_DELETE
from scalesets.reconciler import Outcome, reconcile
from scalesets.refresh import REFRESH_STUCK
from scalesets.spec import Desired, ScalesetSpec, Settings
from tests.clock import FakeClock
from tests.garm_double import CONSOLIDATION_INTERVAL, GITHUB_LINUX_TEMPLATE, GarmDouble, Recorded
from tests.passes import rehearse
from tests.plans import COMING_OR_GOING
from tests.soak import soak_settings
from tests.wire import T0

PROVIDER = "garm-configurator-0"
SETTINGS = Settings(handover_timeout=timedelta(minutes=30), drain_deadline=timedelta(hours=7))
LOGICAL = ("ci", "big")
# Name budgets an operator may set: the default; one that shortens only ``big``'s names;
# one that shortens both; the smallest, a bare hash. One key, up to four names.
NAME_BUDGETS = (10, 9, 8, 6)
LABEL_SETS = (("linux",), ("linux", "x64"), ("linux", "arm64"), ("Linux", "X64", "gpu"))
# Runner options a configurator may publish for a logical scaleset: none, or a pre-job
# script in one of two versions (a change made in place, never by replacement).
PRE_JOB_SCRIPTS = (None, "echo one", "echo two")
# The images an image builder may publish: a new one is changed in place, and the idle
# runners made before are refreshed (docs/adr/0010).
IMAGES = ("image-uuid", "image-uuid-2")
CREATE_ROUTE = r"/organizations/[^/]+/scalesets/?"
# The runner groups a configurator may set: GitHub knows only the first (404 otherwise).
RUNNER_GROUPS = ("Default", "ghost")
# Template writes GARM may refuse for a while (``garm_refuses_templates``).
TEMPLATE_ROUTES = (("POST", r"/templates/?"), ("PUT", r"/templates/\d+/?"))
READS = (("GET", r"/scalesets/?"), ("GET", r"/instances/?"), ("GET", r"/providers/?"))
FAULTS = ("500", "400", "drop", "drop_after")
# How a story begins (``begin``).
STARTS = ("empty", "serving", "busy", "long jobs", "long jobs, relabelled")
# From seconds (GARM's listener start, the youngest delete) to past the drain deadline.
DELAYS = tuple(
    timedelta(seconds=s) for s in (5, 10, 30, 60, 5 * 60, 20 * 60, 45 * 60, 3 * 3600, 8 * 3600)
)
# Where ``drain_deadline_comes`` lands: just before, at, or after the deadline.
AROUND_THE_DEADLINE = tuple(timedelta(seconds=s) for s in (-1, 0, 1, 90))
# The reconcile timer's default interval: how far apart the settling passes start.
TIMER_INTERVAL = timedelta(seconds=30)
# While the passes find nothing to do they wait longer, up to one consolidation of GARM:
# the same passes with a longer reconcile-interval, so settling costs fewer passes.
LONGEST_WAIT = CONSOLIDATION_INTERVAL
# Once every cause is gone, the longest a story may take to settle: the longest back-off
# (an hour) plus a consolidation and a few passes, with margin.
SETTLE_WITHIN = timedelta(hours=2)
# What the stories exercised, summed over all examples; the test asserts each happened.
COVERAGE: Counter[str] = Counter()
# The coverage the unit run must reach, or the stories prove nothing.
MUST_SEE = (
    "faulted POST",
    "faulted PUT",
    "faulted DELETE",
    "force removals",
    "flip-flops",
    "delete kept",
    "removal refused (job still running)",
    "failed runner removed before the deadline",
    "job ended after its removal was refused",
    "waited out a back-off",
    "create refused",
    "blocked",
    "template rewritten in place",
    "template deleted",
    "field refused",
    "template refused",
    "refusal blocked within the count",
    "held back, not re-sent",
    "runner group refused beside a flip-flop",
    "pending_delete re-stamped",
    "pending_delete forced",
    "requeued pass made progress",
    "wake checked",
    "idle runner refreshed",
    "budget raised over a drained generation",
    "force undone by GARM",
    "undone force put to the operator",
    "wait escalated",
)
# How long a phase the status shows may stay as it is, its runners too, before the
# operator must be asked to act (every wait ends in progress or escalation): a refresh
# waits ``REFRESH_STUCK``; anything else at most 30 minutes: a drain past its deadline
# gives a runner the grace in pending_delete then GARM's rounds on the force
# (``FORCE_STUCK``), or names a runner that sat 30 minutes where GARM will not remove
# it; a hand-over waits at most ``handover_timeout``; a refused write is blocked after
# three refusals, within minutes of passes. A refused write's count moves only at a pass,
# so while one holds a phase, time with no pass (``time_passes``: no timer) is not
# counted against it; the waits the charm times itself count all time.
WAIT_BOUND = {Phase.REFRESHING: REFRESH_STUCK}
LONGEST_WAIT_BOUND = max(timedelta(minutes=30), SETTINGS.handover_timeout)


@dataclass(frozen=True)
class _Before:
    """GARM's ground truth as a pass starts: what its requests are judged against."""

    now: datetime
    notes: Mapping[int, Notes]
    born: Mapping[int, datetime]
    runners: Mapping[str, dict[str, Any]]
    memory: Refusals
    names: Mapping[int, str]
    ours: frozenset[int]
    templates: Mapping[int, str]
    requests: int
    removals: int
    deletions: int


@dataclass
class _PassLog:
    """What one pass's requests showed so far: refused, noted to wait, asked."""

    refused: set[tuple[str, Any]] = field(default_factory=set)
    noted: set[tuple[str, Any]] = field(default_factory=set)
    asked: set[str] = field(default_factory=set)


class Changeover(RuleBasedStateMachine):
    """One GARM, two logical scalesets, and everything that can happen to them."""

    def __init__(self, garm: GarmDouble, clock: FakeClock):
        super().__init__()
        self.garm, self.clock = garm, clock
        assert garm.unexpected == [], f"routes GARM does not have: {garm.unexpected}"
        # The clock first: GARM counts as started at reset (its consolidation timer).
        clock.now = T0
        garm.reset()
        garm.add_provider(PROVIDER)
        garm.add_org("example-org")
        garm.runner_groups = set()  # GitHub knows only its Default group
        self.client = GarmClient(garm.url, garm.username, garm.password, timeout=(1, 1))
        self.labels: dict[str, tuple[str, ...]] = {"ci": ("linux", "x64"), "big": ("linux",)}
        # The pre-job script each logical scaleset's runners get (None: no options).
        self.pre_job: dict[str, str | None] = {}
        self.served: dict[str, set[str]] = {}
        # What GARM refused, as the charm keeps it in the peer relation.
        self.memory = Refusals()
        # Runners whose job runs for hours: past any deadline, until ``long_job_ends``.
        self.long_jobs: set[str] = set()
        # What GitHub answers every create while it refuses them (None: it does not).
        self.creates_refused_with: int | None = None
        # Runners GitHub would not let go while their job ran.
        self.refused_runners: set[str] = set()
        self.last: Outcome | None = None
        # The runner group each logical scaleset's configurator sets (absent: Default).
        self.groups: dict[str, str] = {}
        # What GARM answers every template write while it refuses them (None: it does not).
        self.templates_refused_with: int | None = None
        # Each write GARM refused in a row, on the wire: key -> (digest, count, last time).
        self.in_a_row: dict[str, tuple[str, int, datetime]] = {}
        # When a non-faulty pass first saw each runner of a retired scaleset pending_delete.
        self.first_pending: dict[str, datetime] = {}
        # The image each logical scaleset's configurator publishes (absent: the first).
        self.images: dict[str, str] = {}
        # The operator's ``scaleset-name-budget``.
        self.budget = SETTINGS.name_budget
        # When each enabled scaleset was last enabled, in the order passes saw it (a
        # count): of several serving one spec, the serving generation is the earliest.
        self.enabled_since: dict[int, int] = {}
        self.enablings = 0
        # When GARM first took a force-removal of each runner still there (ground truth).
        self.first_forced: dict[str, datetime] = {}
        # When a non-faulty pass first showed each phase as it is now, with its runners
        # as they are (a force GARM undid counts as no change): a wait.
        self.shown_since: dict[tuple[str, Phase, frozenset], datetime] = {}
        # When the last pass ran: the memory forgets what no pass renewed for an hour.
        self.pass_at: datetime | None = None
        # The spans in which time passed with no pass where the timer would have run one:
        # a refusal's count, which only a pass can raise, stood still in them.
        self.no_pass: list[tuple[datetime, datetime]] = []

    # --- what the world does ------------------------------------------------------------

    @initialize(
        start=st.sampled_from(STARTS),
        labels=st.sampled_from(LABEL_SETS),
        deletes_kept=st.booleans(),
        script=st.sampled_from(PRE_JOB_SCRIPTS),
    )
    def begin(self, start, labels, deletes_kept, script):
        """Start from nothing, or from both scalesets serving, a job on each, perhaps a
        job that will run for hours, perhaps relabelled at once (a drain ahead); with a
        GitHub that refuses to delete scale sets (GARM keeps them), or not; ``ci``'s
        runners with a pre-job script, or not."""
        self.garm.delete_keeps_record = deletes_kept
        self.pre_job["ci"] = script
        if start == "empty":
            return
        for _ in range(10):
            if all(self.serving(logical) for logical in self.labels):
                break
            self.timer_fires(1)
        else:
            raise AssertionError(f"nothing serves after five minutes: {self.last}")
        for logical in self.labels if start != "serving" else ():
            self.job_arrives(logical, long=start.startswith("long"))
        if start.endswith("relabelled"):
            for logical, old in list(self.labels.items()):
                other = LABEL_SETS[(LABEL_SETS.index(labels) + 1) % len(LABEL_SETS)]
                self.change_labels(logical, labels if labels != old else other)

    @rule(logical=st.sampled_from(LOGICAL), labels=st.sampled_from(LABEL_SETS))
    def change_labels(self, logical, labels):
        if labels != self.labels.get(logical) and self.has_generation(logical, labels):
            COVERAGE["flip-flops"] += 1
        self.labels[logical] = labels

    @rule(logical=st.sampled_from(LOGICAL), script=st.sampled_from(PRE_JOB_SCRIPTS))
    def change_options(self, logical, script):
        """The configurator sets, changes or drops a runner option: changed in place."""
        self.pre_job[logical] = script

    @rule(logical=st.sampled_from(LOGICAL), image=st.sampled_from(IMAGES))
    def image_published(self, logical, image):
        """An image builder publishes another image: changed in place, idle runners made
        before it refreshed one at a time (``big`` keeps one warm; ``ci`` none)."""
        self.images[logical] = image

    @rule(budget=st.sampled_from(NAME_BUDGETS))
    def the_operator_sets_the_name_budget(self, budget):
        """The operator sets ``scaleset-name-budget``: lowered, generations whose names no
        longer fit are replaced by short-named ones of the same key; raised, a drained
        long-named one fits again beside the one serving, and nothing is replaced."""
        self.budget = budget

    @rule(logical=st.sampled_from(LOGICAL))
    def unpublish(self, logical):
        self.labels.pop(logical, None)
        self.served.pop(logical, None)

    @rule()
    def tick(self):
        self.garm.tick()

    @rule(logical=st.sampled_from(LOGICAL), long=st.booleans())
    def job_arrives(self, logical, long):
        """GitHub hands a job to a listening scaleset serving ``logical``: a busy runner.

        A ``long`` job runs for hours, past any drain deadline, until ``long_job_ends``.
        """
        serving = self.serving(logical)
        if serving:
            name = self.garm.add_runner(serving[0]["id"], runner_status="active")
            if long:
                self.long_jobs.add(name)

    @rule(data=st.data())
    def take_job(self, data):
        """An idle runner of a listening scaleset is handed a job."""
        idle = [
            i
            for i in self.garm.instances()
            if i.get("runner_status") == "idle"
            and i.get("status") == "running"
            and self.garm.listening(i["scale_set_id"])
        ]
        if idle:
            self.garm.start_job(data.draw(st.sampled_from(idle))["name"])

    @rule(data=st.data(), how=st.sampled_from(("vm", "runner", "both")))
    def runner_fails(self, data, how):
        """A runner's VM errors, or the runner fails to start: it will never take a job."""
        alive = [i for i in self.garm.instances() if i.get("status") in ("creating", "running")]
        if alive:
            name = data.draw(st.sampled_from(alive))["name"]
            self.garm.set_runner(
                name,
                status="error" if how != "runner" else None,
                runner_status="failed" if how != "vm" else None,
            )

    @rule(data=st.data())
    def finish_job(self, data):
        busy = [
            i
            for i in self.garm.instances()
            if i.get("runner_status") == "active" and i["name"] not in self.long_jobs
        ]
        if busy:
            self.end_job(data.draw(st.sampled_from(busy))["name"])

    @rule(data=st.data())
    def a_job_runs_long(self, data):
        """A running job turns out to be one that runs for hours, past any deadline."""
        busy = [
            i["name"]
            for i in self.garm.instances()
            if i.get("runner_status") == "active" and i["name"] not in self.long_jobs
        ]
        if busy:
            self.long_jobs.add(data.draw(st.sampled_from(busy)))

    @rule(data=st.data())
    def long_job_ends(self, data):
        """A job that ran for hours ends at last: GitHub may now let its runner go."""
        # In GARM's order (creation), not by name: runner names are random.
        running = [i["name"] for i in self.garm.instances() if i["name"] in self.long_jobs]
        if running:
            self.end_job(data.draw(st.sampled_from(running)))

    @rule(delta=st.sampled_from(DELAYS))
    def time_passes(self, delta):
        self.clock.advance(delta)

    @precondition(lambda self: self.draining())
    @rule(data=st.data(), offset=st.sampled_from(AROUND_THE_DEADLINE))
    def drain_deadline_comes(self, data, offset):
        """Time passes to about the drain deadline of a retired scaleset that still has
        runners, GARM ticks and the timer fires: the moment force-removal may begin."""
        scaleset_id = data.draw(st.sampled_from(self.draining()))
        due = self.garm.disabled_since[scaleset_id] + SETTINGS.drain_deadline + offset
        if due > self.clock.now:
            self.clock.advance(due - self.clock.now)
        self.garm.tick()
        self.run_pass(faulty=False)

    @rule(times=st.integers(1, 6))
    def timer_fires(self, times):
        """What happens most of the time: 30 s pass, GARM ticks, the leader's timer runs
        a pass; a few times over."""
        for _ in range(times):
            self.clock.advance(TIMER_INTERVAL)
            self.garm.tick()
            self.run_pass(faulty=False)

    @rule(keep=st.booleans())
    def github_delete_fails(self, keep):
        """GitHub refuses (or no longer refuses) to delete scale sets: GARM keeps them."""
        self.garm.delete_keeps_record = keep

    @rule(status=st.sampled_from((404, 400, 500)))
    def github_refuses_creates(self, status):
        """GitHub refuses every new scale set (an unknown runner group: 404, say)."""
        self.creates_refused_with = status

    @rule()
    def github_accepts_creates(self):
        """The cause is gone (the operator fixed the runner group, say)."""
        self.creates_refused_with = None

    @rule(logical=st.sampled_from(LOGICAL), group=st.sampled_from(RUNNER_GROUPS))
    def configurator_sets_runner_group(self, logical, group):
        """A runner group GitHub does not know: GARM refuses that field (404) for good,
        and every create that carries it."""
        if group != self.groups.get(logical, "Default") and self.has_generation(
            logical, self.labels.get(logical, ())
        ):
            COVERAGE["runner group refused beside a flip-flop"] += group != "Default"
        self.groups[logical] = group

    @rule(status=st.sampled_from((400, 500)))
    def garm_refuses_templates(self, status):
        """GARM refuses every template write (a database error, a name clash)."""
        self.templates_refused_with = status

    @rule()
    def garm_accepts_templates(self):
        self.templates_refused_with = None

    @rule(data=st.data())
    def provider_cannot_delete(self, data):
        """A runner's provider fails every delete of its VM: GARM retries, re-stamping
        ``updated_at`` each time, and the row stays ``pending_delete``."""
        runners = [i["name"] for i in self.garm.instances()]
        if runners:
            self.garm.provider_cannot_delete(data.draw(st.sampled_from(runners)))
            COVERAGE["pending_delete re-stamped"] += 1

    @precondition(lambda self: self.draining())
    @rule(data=st.data())
    def a_draining_runner_sticks_past_the_deadline(self, data):
        """A retired scaleset's runner ends its job but its provider cannot delete the VM;
        the drain deadline comes and the timer runs on: GARM re-stamps the runner on
        every retry, and only the charm's own sight of it can tell it is stuck. GARM takes
        the charm's force and undoes it at its next try; in half the stories the timer
        runs on past the force's deadline, until the charm asks the operator to act."""
        scaleset_id = data.draw(st.sampled_from(self.draining()))
        runners = [i["name"] for i in self.garm.instances() if i["scale_set_id"] == scaleset_id]
        name = data.draw(st.sampled_from(runners))
        self.garm.provider_cannot_delete(name)
        COVERAGE["pending_delete re-stamped"] += 1
        self.end_job(name)
        # A retired scaleset hears of the job's end at GARM's next consolidation.
        for _ in range(int(CONSOLIDATION_INTERVAL / TIMER_INTERVAL) + 1):
            if self._status_of(name) != "running":
                break
            self.timer_fires(1)
        due = self.garm.disabled_since.get(scaleset_id)
        if due is not None and due + SETTINGS.drain_deadline > self.clock.now:
            self.clock.advance(due + SETTINGS.drain_deadline - self.clock.now)
        self.timer_fires(int(PENDING_DELETE_GRACE / TIMER_INTERVAL) + 2)
        if not data.draw(st.booleans(), label="outlast the force's deadline"):
            return
        self.timer_fires(int(FORCE_STUCK / TIMER_INTERVAL) + 2)
        stuck = self._status_of(name) is not None and name in self.first_forced
        if stuck and self.last is not None and any(p.blocked for p in self.last.progress):
            COVERAGE["undone force put to the operator"] += 1

    @rule()
    def reconcile_pass(self):
        self.run_pass(faulty=False)

    @precondition(lambda self: self.last is not None and self.last.wake is not None)
    @rule()
    def requeue_fires(self):
        """The extra pass the last one asked for (``garm.requeue``) runs at its moment,
        never sooner than a few seconds on, GARM ticking first; when the timer's pass
        comes first, that one runs instead."""
        assert self.last is not None and self.last.wake is not None
        seconds = requeue.delay(self.last.wake, self.clock.now, self.clock.now + TIMER_INTERVAL)
        self.clock.advance(timedelta(seconds=seconds) if seconds else TIMER_INTERVAL)
        self.garm.tick()
        writes = len(self.garm.writes())
        self.run_pass(faulty=False)
        COVERAGE["requeued pass"] += 1
        COVERAGE["requeued pass made progress"] += len(self.garm.writes()) > writes

    @rule(data=st.data(), kind=st.sampled_from(FAULTS))
    def faulty_pass(self, data, kind):
        """A pass in which GARM fails one of the calls it is about to get.

        The call is picked from what the planner will ask first, so the fault always
        lands; with nothing to write, one of the observing reads fails instead. The
        method is drawn before the call, so a kind of write the planner asks for rarely
        (a DELETE beside a dozen PUTs) is faulted as often as the common ones.
        """
        planned = rehearse(
            self.client, self.desired(), self.clock.now, self.settings(), self.memory
        ).done
        if planned:
            routes = [_route_of(action) for action in planned]
            method = data.draw(st.sampled_from(sorted({m for m, _ in routes})))
            path = data.draw(st.sampled_from([p for m, p in routes if m == method]))
            COVERAGE[f"faulted {method}"] += 1
        else:
            method, path = data.draw(st.sampled_from(READS))
        if kind in ("500", "400"):
            self.garm.inject(method, path, status=int(kind))
        else:
            self.garm.inject(method, path, drop=kind == "drop", drop_after=kind == "drop_after")
        self.run_pass(faulty=True)

    # --- what must always hold ----------------------------------------------------------

    @invariant()
    def no_label_gap(self):
        """Once served, a label still asked for is served by a listening scaleset.

        Listening, not only enabled: GARM opens a scaleset's GitHub listener seconds
        after its create or re-enable, and until then nobody takes its labels' jobs.
        """
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
        """A flip-flop re-enables the old generation; nothing is ever built twice.

        One key has one name per name budget (its readable prefix the budget's length),
        so two scalesets with one set of labels differ in that prefix: a lowered budget
        builds the short-named one, and no budget builds either again while it lives.
        """
        seen: set[tuple[tuple[str, ...], str]] = set()
        for scaleset in self.garm.scalesets():
            labels = tuple(sorted(t["name"].lower() for t in scaleset.get("tags", [])))
            prefix = scaleset["name"].rpartition("-")[0]
            assert (labels, prefix) not in seen, f"two scalesets {prefix}-… serve {labels}"
            seen.add((labels, prefix))

    def check_pass(self, before: _Before, *, faulty: bool) -> None:
        """What one pass sent, judged against GARM's ground truth as the pass started."""
        self.templates_written_as_asked(before, faulty=faulty)
        self.no_runner_removed_before_its_deadline(before)
        self.refreshes_keep_warm_capacity(before)
        self.nothing_deleted_young(before)
        refused = self.nothing_resent_before_its_backoff(before)
        if not faulty:
            self.every_refusal_noted(refused)

    def templates_written_as_asked(self, before: _Before, *, faulty: bool) -> None:
        """A new generation is created with its logical scaleset's current template, or
        GARM's own when it has no options; a template is deleted only when nothing uses
        it (GARM would refuse), and only the charm's templates are ever written."""
        desired = {s.name: s for s in self.desired().specs}
        sent = self.garm.requests[before.requests :]
        templates = {t["name"]: t for t in self.garm.templates()}
        for request in sent:
            path = request.path.rstrip("/")
            if request.method == "POST" and path.endswith("/scalesets") and request.status == 200:
                assert isinstance(request.body, dict)
                spec = desired[_logical_of(request.body)]
                mine = templates.get(template_name(spec.name))
                if spec.template_blocks:
                    assert mine is not None and request.body["template_id"] == mine["id"]
                    base = GITHUB_LINUX_TEMPLATE
                    assert mine["data"] == derive_template(base, spec.template_blocks)
                else:
                    assert "template_id" not in request.body
            elif path.startswith("/templates/") and request.method in ("PUT", "DELETE"):
                template_id = int(path.rsplit("/", 1)[1])
                assert template_id in before.ours, f"template {template_id} is not the charm's"
                if request.method == "PUT" and request.status == 200:
                    COVERAGE["template rewritten in place"] += 1
                elif request.status == 200:
                    COVERAGE["template deleted"] += 1
                else:
                    refused = self.templates_refused_with is not None
                    assert faulty or refused, f"{request.method} {path} answered {request.status}"

    def no_runner_removed_before_its_deadline(self, before: _Before) -> None:
        """A runner is force-removed only from a retired scaleset, past the drain deadline
        by GARM's clock and by the charm's stamp, unless it failed (it never takes a job).
        A refresh (not forced) is judged by ``refreshes_keep_warm_capacity``."""
        by_id = {s["id"]: s for s in self.garm.scalesets()}
        for name, scaleset_id, at, force in self.garm.removals[before.removals :]:
            if not force:
                continue
            since = self.garm.disabled_since.get(scaleset_id)
            assert since is not None, f"runner {name} removed from an enabled scaleset"
            runner = before.runners[name]
            if runner.get("status") == "error" or runner.get("runner_status") == "failed":
                if at - since < SETTINGS.drain_deadline:
                    COVERAGE["failed runner removed before the deadline"] += 1
                continue
            assert at - since >= SETTINGS.drain_deadline, f"runner {name} removed early"
            stamp = Notes.read(by_id.get(scaleset_id, {}).get("extended_state", "")).retired_at
            assert stamp is not None, f"runner {name} removed without a retired-at stamp"
            assert at >= stamp + SETTINGS.drain_deadline, f"runner {name} removed early"

    def refreshes_keep_warm_capacity(self, before: _Before) -> None:
        """A refresh (GARM's ordinary delete of a runner) never asks for a busy runner, nor
        one booting, and never takes warm capacity below ``min_idle_runners`` - 1: it asks
        only for an idle runner of an enabled scaleset that, as the pass started, held at
        least ``min_idle_runners`` idle runners and none on its way in or out, one runner
        of a scaleset per pass (docs/adr/0010)."""
        min_idle = {s.name: s.min_idle_runners for s in self.desired().specs}
        enabled = {s["id"] for s in self.garm.scalesets() if s.get("enabled")}
        tags = {s["id"]: {t["name"] for t in s.get("tags", [])} for s in self.garm.scalesets()}
        asked: set[int] = set()
        for request in self.garm.requests[before.requests :]:
            path = request.path.rstrip("/")
            if request.method != "DELETE" or not path.startswith("/instances/"):
                continue
            if request.query.get("forceRemove") == "true":
                continue
            runner = before.runners[path.removeprefix("/instances/")]
            scaleset_id = runner["scale_set_id"]
            assert (runner.get("status"), runner.get("runner_status")) == ("running", "idle"), (
                f"refresh asked for runner {runner['name']}, {runner.get('status')}/"
                f"{runner.get('runner_status')}"
            )
            assert scaleset_id in enabled, f"refresh on retired scaleset {scaleset_id}"
            assert scaleset_id not in asked, f"two refreshes of scaleset {scaleset_id} in a pass"
            asked.add(scaleset_id)
            mine = [r for r in before.runners.values() if r["scale_set_id"] == scaleset_id]
            idle = [
                r for r in mine if (r.get("status"), r.get("runner_status")) == ("running", "idle")
            ]
            (logical,) = [n for n in LOGICAL if n in tags.get(scaleset_id, ())]
            assert len(idle) >= min_idle.get(logical, 1) >= 1, (
                f"refresh of {runner['name']} with {len(idle)} idle runners"
            )
            moving = [
                r["name"]
                for r in mine
                if r.get("status") in COMING_OR_GOING
                or (r.get("runner_status") in ("pending", "installing") and r["status"] != "error")
            ]
            assert not moving, f"refresh of {runner['name']} while {moving} come or go"
            if request.status == 200:
                COVERAGE["idle runner refreshed"] += 1

    def nothing_deleted_young(self, before: _Before) -> None:
        """GARM may not have started its worker for a scaleset younger than 30 s (ADR 0003)."""
        for scaleset_id, name, at in self.garm.deletions[before.deletions :]:
            age = at - before.born[scaleset_id]
            assert age >= YOUNGEST_DELETE, f"scaleset {name} deleted {age} after its start"

    def nothing_resent_before_its_backoff(self, before: _Before) -> set[tuple[str, Any]]:
        """Nothing GARM or GitHub refused is sent again before its back-off is over.

        A scaleset whose delete GARM kept is not deleted again, and a runner GitHub would
        not let go is not force-removed again, before the ``retry-at`` remembered for it as
        the pass started or by the pass itself; no runner or scaleset is asked
        twice in a pass; a create refused before is not sent again for the same request
        before its ``retry_at``, nor twice in a pass. Returns what the pass saw refused:
        ("kept", scaleset id), ("refused", (scaleset id, runner)), ("create", logical name).
        """
        seen = _PassLog()
        sent = self.garm.requests[before.requests :]
        refused_now: set[tuple[str, str]] = set()
        for index, request in enumerate(sent):
            path = request.path.rstrip("/")
            target = f"{request.method} {path}"
            assert request.method != "DELETE" or target not in seen.asked, f"{target} twice"
            seen.asked.add(target)
            if request.method == "DELETE" and path.startswith("/instances/"):
                forced = request.query.get("forceRemove") == "true"
                name = path.removeprefix("/instances/")
                self._removal(before, seen, name, request.status, forced)
            elif request.method == "DELETE" and re.fullmatch(r"/scalesets/\d+", path):
                confirm = sent[index + 1 : index + 2]
                kept = bool(confirm) and confirm[0].method == "GET" and confirm[0].status == 200
                self._delete(before, seen, int(path.rsplit("/", 1)[1]), kept)
            elif request.method == "POST" and path.endswith("/scalesets"):
                assert isinstance(request.body, dict)
                self._create(before, seen, request.body, request.status)
            # Every write, whatever its kind, by the key the memory knows it under.
            keys = _keys_of(request, before, self.garm)
            for key, asked in keys:
                held = before.memory.holding(key, asked, before.now)
                assert held is None, f"{target} ({key}) re-sent before its retry-at: {held}"
                assert (key, asked) not in refused_now, f"{target} ({key}) twice in a pass"
            if len(keys) == 1 and request.status is not None and request.status >= 400:
                refused_now.add(keys[0])
        memory = before.memory
        if any(memory.holding(k, r.digest, before.now) for k, r in memory.refusals.items()):
            COVERAGE["held back, not re-sent"] += 1
        return seen.refused

    def _removal(
        self, before: _Before, seen: _PassLog, name: str, status: int | None, forced: bool
    ) -> None:
        runner = before.runners[name]
        scaleset_id = runner["scale_set_id"]
        scaleset = before.names[scaleset_id]
        write, kind = ("remove", "refused") if forced else ("refresh", "refresh refused")
        assert not _holds(before.memory, write, scaleset, before.now, runner=name), (
            f"runner {name} removed ({write}) before its retry-at (now {before.now})"
        )
        assert (kind, (scaleset_id, name)) not in seen.noted, f"{name}: removed again"
        COVERAGE["force removals" if forced else "refreshes"] += 1
        if status == 400:
            seen.refused.add((kind, (scaleset_id, name)))
            seen.noted.add((kind, (scaleset_id, name)))
            if runner.get("runner_status") == "active":
                self.refused_runners.add(name)
                COVERAGE["removal refused (job still running)"] += 1

    def _delete(self, before: _Before, seen: _PassLog, scaleset_id: int, kept: bool) -> None:
        name = before.names.get(scaleset_id, "")
        assert not _holds(before.memory, "delete", name, before.now), (
            f"scaleset {scaleset_id} deleted before its retry-at"
        )
        assert ("kept", scaleset_id) not in seen.noted, f"scaleset {scaleset_id} deleted again"
        if kept:
            seen.refused.add(("kept", scaleset_id))
            seen.noted.add(("kept", scaleset_id))
            COVERAGE["delete kept"] += 1

    def _create(
        self, before: _Before, seen: _PassLog, body: dict[str, Any], status: int | None
    ) -> None:
        logical = _logical_of(body)
        earlier = before.memory.refusals.get(f"create:{logical}")
        assert not (
            earlier is not None
            and earlier.digest == request_digest(body)
            and before.now < earlier.retry_at
        ), f"create of {logical} re-sent before its retry-at {earlier}"
        assert ("create", logical) not in seen.refused, f"create of {logical} sent again"
        if status is not None and status >= 400:
            seen.refused.add(("create", logical))
            COVERAGE["create refused"] += 1

    def every_refusal_noted(self, refused: set[tuple[str, Any]]) -> None:
        """What GARM or GitHub refused in a pass without faults is remembered with its
        back-off, in the one memory of refusals (``garm.refusals``): a create by logical
        name, a kept delete by the scaleset's name, a refused removal by its runner's."""
        live = {s["id"]: s for s in self.garm.scalesets()}
        soonest = self.clock.now + FIRST_RETRY
        for kind, what in refused:
            scaleset_id, runner = what if kind.endswith("refused") else (what, "")
            if kind == "create":
                key = f"create:{what}"
            elif scaleset_id not in live:
                continue  # deleted after all (a removal refused, then the job ended)
            elif kind == "kept":
                key = f"delete:{live[scaleset_id]['name'].lower()}"
            else:
                write = "remove" if kind == "refused" else "refresh"
                key = f"{write}:{live[scaleset_id]['name'].lower()}:{runner}"
            refusal = self.memory.refusals.get(key)
            assert refusal is not None, f"refused {key} not remembered"
            assert refusal.retry_at >= soonest, refusal

    def refusals_reach_blocked(self, before: _Before) -> None:
        """A write GARM refuses for good (a 4xx), or ``REFUSALS_BEFORE_BLOCKED`` times in
        a row, leaves the status ``blocked``: counted on the wire, by the write's key,
        whatever its kind. A refusal nobody renewed for the longest back-off after its
        retry is of a write nobody asked for any more, and its count starts again."""
        sent = self.garm.requests[before.requests :]
        if self.last is not None and self.last.unreachable is not None:
            sent = sent[:-1]  # GARM may have answered it, but the charm never heard
        now = before.now
        self.in_a_row = {
            key: (asked, count, at)
            for key, (asked, count, at) in self.in_a_row.items()
            if now - (at + backoff(count)) <= LONGEST_RETRY
        }
        due: list[str] = []
        for index, request in enumerate(sent):
            keys = _keys_of(request, before, self.garm)
            if len(keys) != 1 or request.status is None:
                continue  # an update of several fields is split; a dropped call unknown
            ((key, asked),) = keys
            path = request.path.rstrip("/")
            kept = request.method == "DELETE" and re.fullmatch(r"/scalesets/\d+", path)
            refused = request.status >= 400 and not (
                path.startswith("/instances/") and request.status == 404
            )
            if kept:
                confirm = sent[index + 1 : index + 2]
                refused = bool(confirm) and confirm[0].method == "GET" and confirm[0].status == 200
            if not refused:
                if request.status < 400:
                    self.in_a_row.pop(key, None)
                continue
            earlier, count, _ = self.in_a_row.get(key, (asked, 0, now))
            count = count + 1 if earlier == asked else 1
            self.in_a_row[key] = (asked, count, now)
            # A refresh refused says a job started on the runner: blocked only in a row.
            at_once = not kept and is_permanent(request.status) and not key.startswith("refresh:")
            if at_once or count >= REFUSALS_BEFORE_BLOCKED:
                due.append(key)
            COVERAGE["field refused"] += key.startswith("update:")
            COVERAGE["template refused"] += key.startswith("template")
        if due and self.last is not None:
            summary = summarise(self.last, RelationState(True, self.desired()), app="garm")
            assert summary.kind == "blocked", f"{due} refused, yet {summary}"
            COVERAGE["refusal blocked within the count"] += 1

    def status_names_only_what_is_done(self, before: _Before) -> None:
        """The status says a generation is being created only when GARM holds it, enabled
        with the labels asked for (not a flip-flop's disabled one); a scaleset is being
        retired only when its retirement was sent; runners are being force-removed only
        when a removal was sent or is under way."""
        assert self.last is not None
        if self.last.unreachable is not None or self.last.cut_short:
            return  # what it planned is still to do: the next pass sends it
        live = {s["name"].lower(): s for s in self.garm.scalesets()}
        sent = self.garm.requests[before.requests :]
        removed = {
            before.runners[r.path.rstrip("/").removeprefix("/instances/")]["scale_set_id"]
            for r in sent
            if r.method == "DELETE" and r.path.startswith("/instances/")
        }
        put = {r.path.rstrip("/") for r in sent if r.method == "PUT"}
        for progress in self.last.progress:
            if progress.phase in (Phase.CREATING, Phase.CREATING_REPLACEMENT):
                logical = progress.logical_name or ""
                wanted = set(normalise_labels((*self.labels.get(logical, ()), logical)))
                assert any(
                    s.get("enabled") and {t["name"].lower() for t in s.get("tags", [])} == wanted
                    for s in live.values()
                ), f"{progress} yet GARM holds no enabled generation of {sorted(wanted)}"
            if progress.phase is Phase.RETIRING:
                scaleset = live.get(progress.scaleset.lower())
                assert scaleset is not None and f"/scalesets/{scaleset['id']}" in put, (
                    f"{progress} yet no retirement sent"
                )
            if progress.phase is Phase.FORCE_REMOVING:
                scaleset = live.get(progress.scaleset.lower())
                assert scaleset is not None, progress
                forced = any(
                    i["scale_set_id"] == scaleset["id"] and i["status"] == "pending_force_delete"
                    for i in self.garm.instances()
                )
                assert forced or scaleset["id"] in removed, f"{progress} yet none sent"

    def labels_asked_for_are_enabled(self) -> None:
        """A generation GARM holds with the labels asked for, its name within the budget,
        is enabled by the pass, unless its own re-enable is what GARM refused: no other
        field keeps a label unserved. Of several such (the budget raised back over a
        drained one), one enabled is enough: the serving one."""
        for logical, labels in self.labels.items():
            fitting = self.generations_of(logical, labels)
            held = [
                s
                for s in fitting
                if (own := self.memory.refusals.get(f"re-enable:{s['name'].lower()}"))
                and believed_wait(own.retry_at, self.clock.now)
            ]
            assert not fitting or any(s.get("enabled") for s in fitting) or held, (
                f"{logical}: {[s['name'] for s in fitting]} hold {sorted(labels)}, all disabled"
            )

    def serving_generations(self) -> dict[str, dict[str, Any]]:
        """Per logical scaleset, the generation serving what its spec asks for: of the
        enabled scalesets with its labels and a name within the budget, the one enabled
        earliest (then the oldest). Read as a pass starts; a pass that changes neither
        the spec nor the budget keeps it serving."""
        serving: dict[str, dict[str, Any]] = {}
        for logical, labels in self.labels.items():
            fitting = self.generations_of(logical, labels)
            enabled = [s for s in fitting if s.get("enabled")]
            if enabled:
                order = self.enabled_since
                serving[logical] = min(enabled, key=lambda s: (order.get(s["id"], 0), s["id"]))
            if len(enabled) < len(fitting) and enabled:
                COVERAGE["budget raised over a drained generation"] += 1
        return serving

    def serving_generation_never_retired_unasked(self, serving: Mapping[str, dict]) -> None:
        """The serving generation is never retired unasked: a scaleset serving its spec as
        a pass started (``serving_generations``) is enabled when it ends. Only a change
        of what the spec's key holds (labels), the spec going away, or a budget its name
        no longer fits asks for its retirement, and each takes it out of that reading.
        Then the enabled scalesets are noted in the order they were seen enabled."""
        live = {s["id"]: s for s in self.garm.scalesets()}
        for logical, scaleset in serving.items():
            now = live.get(scaleset["id"])
            assert now is not None and now.get("enabled"), (
                f"{logical}: serving generation {scaleset['name']} retired unasked "
                f"(live: {sorted((s['name'], bool(s.get('enabled'))) for s in live.values())})"
            )
        for scaleset_id in list(self.enabled_since):
            if not live.get(scaleset_id, {}).get("enabled"):
                del self.enabled_since[scaleset_id]
        for scaleset_id, scaleset in sorted(live.items()):
            if scaleset.get("enabled") and scaleset_id not in self.enabled_since:
                self.enablings += 1
                self.enabled_since[scaleset_id] = self.enablings

    def stuck_pending_delete_forced(self, before: _Before) -> None:
        """A runner of a retired scaleset past its drain deadline that sat in
        ``pending_delete`` for the grace, by this pass's own sight of it (GARM re-stamps
        ``updated_at`` on every retry), is force-removed, unless its removal backs off."""
        now = self.clock.now
        by_id = {s["id"]: s for s in self.garm.scalesets()}
        for name, runner in before.runners.items():
            scaleset = by_id.get(runner["scale_set_id"])
            if runner.get("status") != "pending_delete" or scaleset is None:
                self.first_pending.pop(name, None)
                continue
            if scaleset.get("enabled"):
                continue
            first = self.first_pending.setdefault(name, before.now)
            notes = Notes.read(scaleset.get("extended_state", ""))
            retired = notes.retired_at
            past = retired is not None and now - retired >= SETTINGS.drain_deadline
            held = _holds(self.memory, "remove", scaleset["name"], now, runner=name) or _holds(
                before.memory, "note", scaleset["name"], before.now
            )
            forced = self.first_forced.get(name)
            given_up = forced is not None and now - forced >= FORCE_STUCK
            if not past or held or given_up or now - first < PENDING_DELETE_GRACE + TIMER_INTERVAL:
                continue
            after = next((i for i in self.garm.instances() if i["name"] == name), None)
            assert after is None or after["status"] == "pending_force_delete", (
                f"runner {name} pending_delete since {first}, not forced at {now}"
            )
            COVERAGE["pending_delete forced"] += 1

    def forces_not_sent_forever(self, before: _Before) -> None:
        """A force-removal GARM took but did not carry out (its provider fails, and its
        delete retries undo the force) is sent again after GARM's rounds, but not once
        ``FORCE_STUCK`` has passed since GARM first took one: then the operator is asked.
        Only while the runner's scaleset stays retired: one enabled again (a flip-flop
        back to it) is no longer drained, and the charm's wait on it is over."""
        now, there = self.clock.now, {i["name"]: i for i in self.garm.instances()}
        enabled = {s["id"] for s in self.garm.scalesets() if s.get("enabled")}
        there = {n: i for n, i in there.items() if i["scale_set_id"] not in enabled}
        self.first_forced = {n: t for n, t in self.first_forced.items() if n in there}
        for name, _, at, force in self.garm.removals[before.removals :]:
            if not force or name not in there:
                continue
            first = self.first_forced.setdefault(name, at)
            assert at - first < FORCE_STUCK + TIMER_INTERVAL, (
                f"runner {name}: force sent at {at}, {at - first} after GARM first took one"
            )
            if at > first:
                COVERAGE["force undone by GARM"] += 1
        late = FORCE_STUCK + TIMER_INTERVAL
        overdue = [n for n, t in self.first_forced.items() if now - t >= late]
        if overdue and self.last is not None and self.last.ok:
            # Told of that scaleset's family (which shows one of its stuck parts), not
            # excused by another cause blocking elsewhere.
            live = {s["id"]: s for s in self.garm.scalesets()}
            for name in overdue:
                scaleset = live.get(there[name]["scale_set_id"], {})
                labels = {t["name"].lower() for t in scaleset.get("tags", [])}
                shown = scaleset.get("name", "?")
                told = [
                    p
                    for p in self.last.progress
                    if p.blocked
                    and (shown in p.blocked or (p.logical_name or "").lower() in labels)
                ]
                assert told, f"runner {name} of {shown} forced long ago, yet {self.last.progress}"
            COVERAGE["wait escalated"] += 1

    def every_wait_ends(self) -> None:
        """Every wait ends in progress or escalation: a phase the status shows unchanged
        (same scaleset, phase and runners) for longer than its bound is told as stuck
        (or the status is blocked for another cause). A drain counts only from its
        deadline; a refresh waiting on busy runners that fill ``max_runners`` waits on
        jobs, not GARM. While a write on the phase's scaleset is refused but not yet
        ``blocked``, the time with no pass is left out: the charm escalates it at its
        ``REFUSALS_BEFORE_BLOCKED``-th refusal, and only a pass can be refused (a kept
        delete refused once, then 45 minutes without a timer, was blocked only two minutes
        of passes later); ``refusals_reach_blocked`` holds the count itself."""
        assert self.last is not None
        now, shown = self.clock.now, {}
        summary = summarise(self.last, RelationState(True, self.desired()), app="garm")
        live = {s["name"].lower(): s for s in self.garm.scalesets()}
        for progress in self.last.progress:
            scaleset = live.get(progress.scaleset.lower())
            key = (progress.names, progress.phase, frozenset(self.runners_of(scaleset)))
            since = shown[key] = self.shown_since.get(key, now)
            bound = WAIT_BOUND.get(progress.phase, LONGEST_WAIT_BOUND)
            if progress.phase in (Phase.DRAINING, Phase.FORCE_REMOVING):
                retired = Notes.read((scaleset or {}).get("extended_state", "")).retired_at
                if retired is None:
                    continue
                since = max(since, retired + SETTINGS.drain_deadline)
            if progress.phase is Phase.REFRESHING and scaleset is not None:
                runners = [i for i in self.garm.instances() if i["scale_set_id"] == scaleset["id"]]
                busy = all(i["runner_status"] in ("idle", "active") for i in runners)
                if busy and len(runners) >= scaleset["max_runners"]:
                    continue
            if self.counting_refusals(progress):
                since += self.without_a_pass(since, now)
            if now - since < bound + 2 * TIMER_INTERVAL:
                continue
            assert progress.blocked or summary.kind == "blocked", (
                f"{progress.names}: {progress.describe()} since {since}, not escalated: "
                f"{summary}; its runners: {self.runners_of(scaleset)}"
            )
            COVERAGE["wait escalated"] += 1
        self.shown_since = shown

    def counting_refusals(self, progress: Progress) -> bool:
        """Whether a write on this phase's scaleset (or its family's create) is refused,
        not yet ``blocked``: the charm escalates it at the ``REFUSALS_BEFORE_BLOCKED``-th
        refusal in a row (ADR 0003, 4), and a refusal comes only at a pass."""
        names = {progress.scaleset.lower(), (progress.logical_name or "").lower()}
        return any(
            key.partition(":")[2].partition(":")[0] in names and not refusal.blocked
            for key, refusal in self.memory.refusals.items()
        )

    def without_a_pass(self, since: datetime, now: datetime) -> timedelta:
        """How much of ``since`` .. ``now`` passed with no pass where the timer would have
        run one (``time_passes``: no timer then)."""
        return sum(
            (max(min(end, now) - max(start, since), timedelta(0)) for start, end in self.no_pass),
            timedelta(0),
        )

    def runners_of(self, scaleset: dict | None) -> list[tuple[str, str, str]]:
        """A scaleset's runners as GARM has them: name, status, runner status; a force
        GARM took and will undo reads as the ``pending_delete`` it goes back to."""
        return [
            (i["name"], i["status"].replace("_force", ""), i["runner_status"])
            for i in self.garm.instances()
            if scaleset is not None and i["scale_set_id"] == scaleset["id"]
        ]

    def teardown(self):
        """Every story ends settled once faults stop and every job ends."""
        try:
            self.settle()
        finally:
            self.client.close()

    # --- helpers ------------------------------------------------------------------------

    def run_pass(self, *, faulty: bool) -> None:
        """One reconcile pass, as the leader's timer or a hook runs it, then its checks."""
        if self.creates_refused_with is not None:
            self.garm.inject("POST", CREATE_ROUTE, status=self.creates_refused_with, times=99)
        if self.templates_refused_with is not None:
            for method, route in TEMPLATE_ROUTES:
                self.garm.inject(method, route, status=self.templates_refused_with, times=99)
        if self.pass_at is not None and self.clock.now - self.pass_at > LONGEST_RETRY:
            # No pass for over an hour (no timer): the memory forgot, every wait restarts.
            self.shown_since.clear()
        if self.pass_at is not None and self.clock.now - self.pass_at > TIMER_INTERVAL:
            self.no_pass.append((self.pass_at + TIMER_INTERVAL, self.clock.now))
        self.pass_at = self.clock.now
        before = self.before()
        serving = self.serving_generations()
        self.last = reconcile(
            self.client, self.desired(), self.clock.now, self.settings(), memory=self.memory
        )
        self.garm.clear_faults()
        self.memory = self.last.memory
        self.check_pass(before, faulty=faulty)
        self.serving_generation_never_retired_unasked(serving)
        self.refusals_reach_blocked(before)
        self.status_names_only_what_is_done(before)
        self.forces_not_sent_forever(before)
        if not faulty:
            self.labels_asked_for_are_enabled()
            self.stuck_pending_delete_forced(before)
            self.wake_is_not_late()
            self.every_wait_ends()
        if any(p.blocked for p in self.last.progress):
            COVERAGE["blocked"] += 1
        if any(s.blocking for s in self.last.skipped):
            COVERAGE["create blocked"] += 1
        waiting = [
            name
            for name in before.names.values()
            if _holds(before.memory, "delete", name, before.now)
            or any(
                _holds(before.memory, "remove", name, before.now, runner=runner)
                for runner in before.runners
            )
        ]
        if waiting and not faulty and self.last.ok:
            COVERAGE["waited out a back-off"] += 1

    def wake_is_not_late(self) -> None:
        """Nothing the pass waits on in time comes before the moment it said to wake at.

        Read GARM as it stands now at a second before that moment (or, with no moment,
        past the drain deadline): with nothing changed in GARM meanwhile, a pass then
        plans no write, or the charm would sleep through progress it could make. What
        only GARM's own changes bring (a runner reporting) is not a matter of time.
        """
        outcome = self.last
        if outcome is None or outcome.unreachable is not None or outcome.cut_short:
            return
        wake = outcome.wake
        # Nor early: due at once only when this pass left writes for the next one.
        assert wake is None or wake > self.clock.now or outcome.done or outcome.errors, (
            f"a pass that did nothing asks for the next one at once: {outcome.progress}"
        )
        at = wake - timedelta(seconds=1) if wake else self.clock.now + timedelta(hours=9)
        if at <= self.clock.now:
            return
        later = rehearse(self.client, self.desired(), at, self.settings(), self.memory).done
        assert not later, (
            f"at {at} a pass would write {later}, but the last one said to wake at {wake}"
        )
        COVERAGE["wake checked"] += 1

    def before(self) -> _Before:
        scalesets = self.garm.scalesets()
        notes = {s["id"]: Notes.read(s.get("extended_state", "")) for s in scalesets}
        born = {s["id"]: parse_time(s["created_at"]) for s in scalesets}
        return _Before(
            now=self.clock.now,
            notes=notes,
            born=born,
            runners={i["name"]: i for i in self.garm.instances()},
            memory=self.memory,
            names={s["id"]: s["name"] for s in scalesets},
            ours=frozenset(
                t["id"] for t in self.garm.templates() if t["name"].startswith("garm-charm-")
            ),
            templates={t["id"]: t["name"] for t in self.garm.templates()},
            requests=len(self.garm.requests),
            removals=len(self.garm.removals),
            deletions=len(self.garm.deletions),
        )

    def settings(self) -> Settings:
        """The charm's settings: the soak's, with the operator's name budget."""
        return dataclasses.replace(SETTINGS, name_budget=self.budget)

    def generations_of(self, logical: str, labels: tuple[str, ...]) -> list[dict[str, Any]]:
        """The scalesets GARM holds with ``logical``'s labels and a name the budget fits."""
        wanted = set(normalise_labels((*labels, logical)))
        return [
            s
            for s in self.garm.scalesets()
            if {t["name"].lower() for t in s.get("tags", [])} == wanted
            and len(s["name"].encode()) <= self.budget
        ]

    def draining(self) -> list[int]:
        """Retired scalesets that still have runners, by id."""
        held = {i["scale_set_id"] for i in self.garm.instances()}
        return sorted(held & set(self.garm.disabled_since))

    def _status_of(self, runner: str) -> str | None:
        """GARM's status of a runner now; None once its row is gone."""
        return next((i["status"] for i in self.garm.instances() if i["name"] == runner), None)

    def end_job(self, name: str) -> None:
        """A runner's job ends; GARM hears of it at once only if the scaleset listens."""
        self.long_jobs.discard(name)
        if name in self.refused_runners:
            COVERAGE["job ended after its removal was refused"] += 1
        self.garm.finish_job(name)

    def desired(self) -> Desired:
        return Desired(
            tuple(
                ScalesetSpec(
                    source=f"garm-configurator/{i}",
                    name=logical,
                    entity_kind="organization",
                    entity_name="example-org",
                    provider_name=PROVIDER,
                    image=self.images.get(logical, IMAGES[0]),
                    flavor="m1.small",
                    os_arch="amd64",
                    max_runners=3,
                    min_idle_runners=1 if logical == "big" else 0,
                    labels=labels,
                    runner_group=self.groups.get(logical, "Default"),
                    template_blocks=install_blocks(
                        RunnerOptions(pre_job_script=self.pre_job.get(logical)), None
                    ),
                )
                for i, (logical, labels) in enumerate(sorted(self.labels.items()))
            )
        )

    def serving(self, logical: str) -> list[dict]:
        """The listening scalesets carrying ``logical`` as a label: GitHub's job targets."""
        return [
            s
            for s in self.garm.scalesets()
            if self.garm.listening(s["id"]) and logical in {t["name"] for t in s.get("tags", [])}
        ]

    def has_generation(self, logical: str, labels: tuple[str, ...]) -> bool:
        wanted = set(normalise_labels((*labels, logical)))
        return any(
            {t["name"].lower() for t in s.get("tags", [])} == wanted for s in self.garm.scalesets()
        )

    def served_labels(self, logical: str) -> set[str]:
        """Labels of the listening scalesets that carry ``logical`` as a label."""
        served: set[str] = set()
        for scaleset in self.garm.scalesets():
            tags = {t["name"].lower() for t in scaleset.get("tags", [])}
            if self.garm.listening(scaleset["id"]) and logical in tags:
                served |= tags
        return served

    def settle(self):
        """Stop faults and GitHub's refusals, let every job end, then let time pass.

        The timer fires every 30 s, GARM ticks in between (its consolidation reaps the
        runners whose jobs ended unseen); while passes find nothing to do the waits grow
        up to one consolidation. The story must settle within ``SETTLE_WITHIN``: a pass
        with nothing under way that writes nothing, twice.
        """
        self.garm.clear_faults()
        self.garm.delete_keeps_record = False
        self.creates_refused_with = None
        self.templates_refused_with = None
        self.groups.clear()
        self.garm.providers_recover()
        for instance in self.garm.instances():
            if instance.get("runner_status") == "active":
                self.end_job(instance["name"])
        deadline = self.clock.now + SETTLE_WITHIN
        wait, quiet = TIMER_INTERVAL, 0
        while quiet < 2:
            assert self.clock.now < deadline, f"not settled within {SETTLE_WITHIN}: {self.last}"
            self.clock.advance(wait)
            self.garm.tick()
            writes = len(self.garm.writes())
            self.run_pass(faulty=False)
            outcome = self.last
            assert outcome is not None and outcome.ok, outcome
            self.no_label_gap()
            wrote = len(self.garm.writes()) > writes
            # Settled: nothing written, nothing under way, skipped or held back.
            settled = not (wrote or outcome.progress or outcome.skipped or outcome.held)
            quiet = quiet + 1 if settled else 0
            wait = TIMER_INTERVAL if wrote or settled else min(wait * 2, LONGEST_WAIT)
        live = self.garm.scalesets()
        assert len(live) == len(self.labels), live
        templates = {t["name"]: t for t in self.garm.templates()}
        system = templates["github_linux"]["id"]
        for logical, labels in self.labels.items():
            (mine,) = [s for s in live if logical in {t["name"] for t in s.get("tags", [])}]
            assert mine.get("enabled") is True
            assert {t["name"].lower() for t in mine["tags"]} == set(
                normalise_labels((*labels, logical))
            )
            template = templates.get(template_name(logical))
            if self.pre_job.get(logical):
                assert template is not None and mine["template_id"] == template["id"]
                script = self.pre_job[logical]
                blocks = install_blocks(RunnerOptions(pre_job_script=script), None)
                assert template["data"] == derive_template(GITHUB_LINUX_TEMPLATE, blocks)
            else:
                assert template is None and mine["template_id"] == system
        # No template of the charm's outlives what asked for it.
        wanted = {template_name(n) for n in self.labels if self.pre_job.get(n)}
        assert {n for n in templates if n.startswith("garm-charm-")} == wanted


def test_changeovers_keep_every_invariant(garm: GarmDouble, clock: FakeClock):
    class OnThisGarm(Changeover):
        def __init__(self):
            super().__init__(garm, clock)

    COVERAGE.clear()
    run_state_machine_as_test(OnThisGarm, settings=soak_settings(50, 110))
    # The stories must have reached what the invariants guard, or they prove nothing.
    missing = [seen for seen in MUST_SEE if not COVERAGE[seen]]
    assert not missing, f"stories never reached {missing}: {dict(COVERAGE)}"
    report = os.environ.get("GARM_SOAK_REPORT")
    if report:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(json.dumps(dict(sorted(COVERAGE.items())), indent=2) + "\n")


def test_a_refusal_escalates_by_its_count_not_the_time_without_a_pass(
    garm: GarmDouble, clock: FakeClock
):
    """A delete GARM keeps, refused once, then 45 minutes with no pass (no timer): the
    second refusal comes at the next pass, the third (blocked) two minutes later. The
    wait's bound counts only the time the charm had passes in (soak seed
    264740950951397360693172056006827883316 at the soak's long settings)."""
    story = Changeover(garm, clock)
    story.begin(start="serving", deletes_kept=True, script=None, labels=("linux",))
    story.change_labels("ci", ("linux",))
    story.timer_fires(3)
    assert story.memory.refusals["delete:ci-24ec4a"].refusals == 1
    story.time_passes(timedelta(minutes=45))
    story.timer_fires(1)
    assert story.memory.refusals["delete:ci-24ec4a"].refusals == 2
    story.timer_fires(4)
    assert story.last is not None
    (progress,) = story.last.progress
    assert progress.phase is Phase.AWAITING_DELETION
    assert progress.blocked.startswith("GARM kept scaleset ci-24ec4a after 3 deletes")


def _route_of(action: Write) -> tuple[str, str]:
    """The GARM call an action makes, as a fault pattern for the double."""
    if isinstance(action, CreateScaleset):
        return "POST", CREATE_ROUTE
    if isinstance(action, UpdateScaleset):
        return "PUT", rf"/scalesets/{action.scaleset_id}/?"
    if isinstance(action, RemoveInstance):
        return "DELETE", rf"/instances/{action.instance_name}/?"
    if isinstance(action, CreateTemplate):
        return "POST", r"/templates/?"
    if isinstance(action, UpdateTemplate | DeleteTemplate):
        method = "PUT" if isinstance(action, UpdateTemplate) else "DELETE"
        return method, rf"/templates/{action.template_id}/?"
    assert isinstance(action, DeleteScaleset)
    return "DELETE", rf"/scalesets/{action.scaleset_id}/?"


def _holds(memory: Refusals, write: str, scaleset: str, now: datetime, runner: str = "") -> bool:
    """Whether ``write`` (``delete``: GARM kept it; ``remove``: GitHub would not let
    ``runner`` go) of a scaleset is held back by its back-off at ``now``."""
    key = f"{write}:{scaleset.lower()}" + (f":{runner}" if runner else "")
    refusal = memory.refusals.get(key)
    return refusal is not None and believed_wait(refusal.retry_at, now)


def _logical_of(body: Mapping[str, Any]) -> str:
    """The logical scaleset a create is for: the one of its labels that names one."""
    labels = {str(label).lower() for label in body.get("labels", [])}
    (logical,) = [name for name in LOGICAL if name in labels]
    return logical


def _keys_of(request: Recorded, before: _Before, garm: GarmDouble) -> list[tuple[str, str]]:
    """The writes a request makes, as the memory of refusals keys them (``garm.refusals``):
    read off the wire, not from the charm's actions. An update of several fields is each
    of them; a request that only rewrites the notes is left out (a note, or the notes
    of an update: the wire cannot tell)."""
    path = request.path.rstrip("/")
    body = request.body if isinstance(request.body, dict) else {}
    if path.startswith("/templates"):
        return _template_keys(request.method, path, body, before)
    names = {**before.names, **{s["id"]: s["name"] for s in garm.scalesets()}}
    if request.method == "POST" and path.endswith("/scalesets"):
        return [(f"create:{_logical_of(body)}", request_digest(body))]
    if request.method == "PUT" and (found := re.fullmatch(r"/scalesets/(\d+)", path)):
        return _update_keys(names[int(found[1])].lower(), body)
    if request.method == "DELETE" and path.startswith("/instances/"):
        runner = before.runners.get(path.removeprefix("/instances/"))
        if runner is None:
            return []
        name = path.removeprefix("/instances/")
        write = "remove" if request.query.get("forceRemove") == "true" else "refresh"
        return [(f"{write}:{names[runner['scale_set_id']].lower()}:{name}", "")]
    if request.method == "DELETE" and (found := re.fullmatch(r"/scalesets/(\d+)", path)):
        return [(f"delete:{names[int(found[1])].lower()}", "")]
    return []


def _update_keys(name: str, body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The writes a scaleset's PUT makes: a re-enable or a retirement alone, else one per
    field (notes aside)."""
    asked = {k: v for k, v in body.items() if k != "extended_state"}
    if "enabled" in asked:
        purpose = "re-enable" if asked["enabled"] else "retire"
        return [(f"{purpose}:{name}", digest(asked))]
    if asked and set(asked) <= {"min_idle_runners", "max_runners"} and not any(asked.values()):
        return [(f"retire:{name}", digest(asked))]
    return [(field_key(name, f), digest(v)) for f, v in asked.items()]


def _template_keys(
    method: str, path: str, body: Mapping[str, Any], before: _Before
) -> list[tuple[str, str]]:
    """The writes a request on ``/templates`` makes."""
    if method == "POST" and path == "/templates":
        return [(f"template:{body.get('name', '')}", digest(body.get("description", "")))]
    if (found := re.fullmatch(r"/templates/(\d+)", path)) and method in ("PUT", "DELETE"):
        name = before.templates.get(int(found[1]), "")
        if method == "DELETE":
            return [(f"template-delete:{name}", "")]
        return [(f"template:{name}", digest(body.get("description", "")))]
    return []
