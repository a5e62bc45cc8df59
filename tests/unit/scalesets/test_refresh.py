"""Idle runners made before a change that new runners get, refreshed one at a time.

Pure planner tables (docs/adr/0010): the note of the change, what counts as outdated,
the pace (one at a time, the next once its replacement is idle, never below
``min_idle_runners`` - 1 idle), what is never refreshed, and the refusals. Then whole
passes against the GARM double (its runners booting, taking and finishing jobs on its
clock), and a state machine of a warm pool whose image, options and jobs change at
random, checking after every pass that a refresh never asks for a busy or booting
runner and never leaves fewer than ``min_idle_runners`` - 1 idle.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime, timedelta

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from garm.models import Instance, ScaleSet, Template
from garm.refusals import Refusals, first_refusal
from runners.options import RunnerOptions
from runners.scripts import install_blocks
from runners.templates import UpdateTemplate
from scalesets import reconciler
from scalesets.actions import Phase, RemoveInstance, UpdateScaleset
from scalesets.notes import Notes, unread
from scalesets.planner import plan
from scalesets.reconciler import reconcile
from scalesets.refresh import REFRESH_MARGIN, RUNNER_FIELDS
from scalesets.spec import Desired, HeldSpec, ScalesetSpec, Settings
from tests.garm_double import GarmDouble
from tests.passes import SETTINGS, Passes, rehearse
from tests.plans import COMING_OR_GOING, NOW, generation, observe, retired, run, runner
from tests.soak import soak_settings
from tests.specs import make_spec
from tests.wire import T0, go_time, template_json

WARM = make_spec(min_idle_runners=3, max_runners=6)
# The image changed ten minutes ago: well past the margin.
CHANGED = NOW - timedelta(minutes=10)
BEFORE = CHANGED - timedelta(hours=1)


def current(spec=WARM, changed: datetime | None = CHANGED, id=1, **overrides) -> ScaleSet:
    """The generation serving ``spec``, noted as changed at ``changed`` (None: never)."""
    notes = Notes(changed_at=changed).text() if changed is not None else ""
    return generation(spec, id, extended_state=notes, **overrides)


def pool(scaleset: ScaleSet, *states, made=BEFORE) -> list[Instance]:
    """Runners ``r0``, ``r1`` ... in (status, runner_status), made a second apart from ``made``."""
    return [
        runner(f"r{n}", scaleset, status=status, runner_status=runner_status, created_at=at)
        for n, (status, runner_status) in enumerate(states)
        for at in [made + timedelta(seconds=n)]
    ]


IDLE = ("running", "idle")
BUSY = ("running", "active")
BOOTING = ("running", "pending")
GOING = ("pending_delete", "idle")


def refreshes(result) -> list[str]:
    return [a.instance_name for a in result.actions if isinstance(a, RemoveInstance)]


def blocks(pre_job: str) -> str:
    """The charm's blocks of a runner template with a pre-job script."""
    return install_blocks(RunnerOptions(pre_job_script=pre_job), None)


def refresh(name: str, scaleset: ScaleSet, logical: str = "ci") -> RemoveInstance:
    return RemoveInstance(name, scaleset.id, scaleset.name, logical, force=False)


# --- the note ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("image", "new-image"),
        ("flavor", "m1.large"),
        ("os_arch", "arm64"),
        ("runner_group", "other"),
        ("extra_specs", {"disable_updates": True}),
    ],
)
def test_a_change_of_what_new_runners_get_is_noted_in_the_same_update(field, value):
    scaleset = generation(WARM, 1)
    (update,) = run(
        dataclasses.replace(WARM, **{field: value}), observed=observe(scaleset)
    ).actions
    assert isinstance(update, UpdateScaleset)
    assert field in update.changes
    assert Notes.read(update.changes["extended_state"]).changed_at == NOW


def test_a_change_of_counts_is_not_noted():
    scaleset = generation(WARM, 1)
    spec = dataclasses.replace(WARM, max_runners=9, min_idle_runners=4)
    (update,) = run(spec, observed=observe(scaleset)).actions
    assert isinstance(update, UpdateScaleset)
    assert "extended_state" not in update.changes


def test_the_fields_noted_are_those_garm_raises_the_generation_for_and_the_template():
    assert {"image", "flavor", "os_arch", "runner_group", "extra_specs"} < RUNNER_FIELDS
    assert "template_id" in RUNNER_FIELDS
    assert not {"max_runners", "min_idle_runners", "enabled"} & RUNNER_FIELDS


def test_the_note_reads_back_and_one_too_far_ahead_is_not_believed():
    notes = Notes(changed_at=CHANGED, specs="abc123")
    assert Notes.read(notes.text()) == notes
    assert f"changed-at={go_time(CHANGED)}" in notes.text()
    ahead = Notes(changed_at=NOW + timedelta(days=2))
    assert Notes.read(ahead.text()).believed(NOW).changed_at is None
    assert unread("changed-at=yesterday") == ("changed-at",)
    # A retirement or a re-enable keeps it: what the runners were made with is unchanged.
    assert notes.retired(NOW).changed_at == CHANGED
    assert notes.enabled(NOW).changed_at == CHANGED


# --- the pace ---------------------------------------------------------------------------


def test_a_warm_pool_is_refreshed_one_at_a_time_oldest_first():
    scaleset = current()
    runners = pool(scaleset, IDLE, IDLE, IDLE)
    result = run(WARM, observed=observe(scaleset, instances=runners))
    assert list(result.actions) == [refresh("r0", scaleset)]
    (progress,) = result.progress
    assert (progress.phase, progress.runners, progress.scaleset) == (
        Phase.REFRESHING,
        3,
        scaleset.name,
    )
    assert progress.describe() == "refreshing 3 idle runners"


def test_the_next_goes_only_once_the_replacement_is_idle():
    scaleset = current()
    r0, r1, r2 = pool(scaleset, IDLE, IDLE, IDLE)
    fresh = NOW - timedelta(seconds=5)
    # r0 on its way out; then gone and its replacement booting: nothing.
    going = dataclasses.replace(r0, status="pending_delete")
    assert refreshes(run(WARM, observed=observe(scaleset, instances=[going, r1, r2]))) == []
    replacement = runner(
        "new", scaleset, status="creating", runner_status="pending", created_at=fresh
    )
    waiting = run(WARM, observed=observe(scaleset, instances=[replacement, r1, r2]))
    assert refreshes(waiting) == []
    assert [p.runners for p in waiting.progress] == [2]
    # Gone with no replacement yet: two idle of three asked for, nothing either.
    assert refreshes(run(WARM, observed=observe(scaleset, instances=[r1, r2]))) == []
    # The replacement idle (and made after the change): the next outdated one goes.
    ready = runner("new", scaleset, created_at=fresh)
    assert refreshes(run(WARM, observed=observe(scaleset, instances=[ready, r1, r2]))) == ["r1"]


@pytest.mark.parametrize("moving", [GOING, BOOTING, ("creating", "pending")])
def test_one_at_a_time_even_with_idle_runners_to_spare(moving):
    # Four idle of three asked for (one made for a queued job): still none goes while a
    # runner is on its way in or out.
    scaleset = current()
    runners = pool(scaleset, moving, IDLE, IDLE, IDLE, IDLE)
    result = run(WARM, observed=observe(scaleset, instances=runners))
    assert refreshes(result) == []
    assert [p.runners for p in result.progress] == [4]


def test_never_a_busy_runner_nor_a_booting_one():
    scaleset = current()
    busy = pool(scaleset, BUSY, BUSY, IDLE, IDLE, IDLE)
    assert refreshes(run(WARM, observed=observe(scaleset, instances=busy))) == ["r2"]
    only_busy = pool(scaleset, BUSY, BUSY, BUSY)
    result = run(WARM, observed=observe(scaleset, instances=only_busy))
    assert (refreshes(result), result.progress) == ([], ())
    booting = pool(scaleset, IDLE, IDLE, IDLE, BOOTING)
    assert refreshes(run(WARM, observed=observe(scaleset, instances=booting))) == []


@pytest.mark.parametrize("idle", [0, 1, 2])
def test_never_below_min_idle_minus_one(idle):
    scaleset = current()
    runners = pool(scaleset, *[IDLE] * idle, BUSY)
    assert refreshes(run(WARM, observed=observe(scaleset, instances=runners))) == []


def test_min_idle_one_refreshes_its_only_idle_runner():
    spec = make_spec(min_idle_runners=1)
    scaleset = current(spec)
    runners = pool(scaleset, IDLE)
    assert refreshes(run(spec, observed=observe(scaleset, instances=runners))) == ["r0"]


def test_min_idle_zero_is_never_refreshed():
    # Its idle runners are there for jobs GitHub is about to hand them.
    spec = make_spec(min_idle_runners=0)
    scaleset = current(spec)
    result = run(spec, observed=observe(scaleset, instances=pool(scaleset, IDLE, IDLE)))
    assert (list(result.actions), result.progress) == ([], ())


# --- what is outdated ------------------------------------------------------------------


def test_a_runner_made_after_the_change_is_kept():
    scaleset = current()
    after = CHANGED + REFRESH_MARGIN + timedelta(seconds=1)
    runners = pool(scaleset, IDLE, IDLE, IDLE, made=after)
    result = run(WARM, observed=observe(scaleset, instances=runners))
    assert (list(result.actions), result.progress) == ([], ())


def test_a_runner_made_in_the_margin_is_outdated_and_the_refresh_waits_it_out():
    changed = NOW - timedelta(minutes=1)
    scaleset = current(changed=changed)
    runners = pool(scaleset, IDLE, IDLE, IDLE, made=changed + timedelta(seconds=30))
    waiting = run(WARM, observed=observe(scaleset, instances=runners))
    assert refreshes(waiting) == []
    assert [p.runners for p in waiting.progress] == [3]
    assert waiting.wake == changed + REFRESH_MARGIN
    later = run(WARM, observed=observe(scaleset, instances=runners), now=changed + REFRESH_MARGIN)
    assert refreshes(later) == ["r0"]


def test_nothing_is_refreshed_without_a_note_or_a_template_change():
    scaleset = current(changed=None)
    runners = pool(scaleset, IDLE, IDLE, IDLE)
    result = run(WARM, observed=observe(scaleset, instances=runners))
    assert (list(result.actions), result.progress) == ([], ())


def test_a_template_changed_in_place_refreshes_the_runners_made_before():
    # No note: the template's own updated_at says when its body last changed.
    written = NOW - timedelta(minutes=5)
    template = Template.from_json(template_json(7, "garm-charm-ci", updated_at=written))
    scaleset = current(changed=None, template_id=7)
    runners = [
        *pool(scaleset, IDLE, IDLE),
        runner("made-after", scaleset, created_at=written + timedelta(seconds=1)),
    ]
    observed = dataclasses.replace(observe(scaleset, instances=runners), templates=(template,))
    result = run(WARM, observed=observed)
    assert refreshes(result) == ["r0"]
    assert [p.runners for p in result.progress] == [2]
    # Another scaleset's template tells nothing about this one's runners.
    other = dataclasses.replace(template, id=8)
    observed = dataclasses.replace(observed, templates=(other,))
    assert refreshes(run(WARM, observed=observed)) == []


# --- what is never refreshed ------------------------------------------------------------


def test_nothing_once_the_option_is_off():
    scaleset = current()
    runners = pool(scaleset, IDLE, IDLE, IDLE)
    off = Settings(refresh_idle_runners=False)
    result = run(WARM, observed=observe(scaleset, instances=runners), settings=off)
    assert (list(result.actions), result.progress) == ([], ())


def test_nothing_on_a_retiring_or_draining_scaleset_nor_while_a_changeover_runs():
    # The labels changed: the noted generation is now a predecessor, its runners drain.
    scaleset = current()
    new_spec = dataclasses.replace(WARM, labels=("linux", "arm64"))
    runners = pool(scaleset, IDLE, IDLE, IDLE)
    replacing = run(new_spec, observed=observe(scaleset, instances=runners))
    assert refreshes(replacing) == []
    draining = retired(scaleset)
    new = current(new_spec, id=2)
    fresh = pool(new, IDLE, IDLE, IDLE)
    result = run(new_spec, observed=observe(draining, new, instances=[*runners, *fresh]))
    assert refreshes(result) == []
    assert Phase.REFRESHING not in [p.phase for p in result.progress]


def test_nothing_in_a_contested_held_or_partly_seen_family():
    scaleset = current()
    runners = pool(scaleset, IDLE, IDLE, IDLE)
    observed = observe(scaleset, instances=runners)
    twin = dataclasses.replace(WARM, source="other-configurator/0")
    assert refreshes(run(WARM, twin, observed=observed)) == []
    held = HeldSpec("garm-configurator/0", "ci", "invalid image")
    assert refreshes(run(observed=observed, held=(held,))) == []
    unsettled = Desired((WARM,), complete=False, unsettled=frozenset({"ci"}))
    assert refreshes(plan(unsettled, observed, NOW, Settings())) == []


# --- refusals ---------------------------------------------------------------------------


def test_a_refused_refresh_waits_out_its_back_off_and_holds_the_next():
    scaleset = current()
    runners = pool(scaleset, IDLE, IDLE, IDLE)
    ((key, asked),) = refresh("r0", scaleset).asks()
    cause = "The runner cannot be removed while it is running a job."
    refused = Refusals({key: first_refusal(asked, NOW, cause, False)})
    observed = dataclasses.replace(observe(scaleset, instances=runners), refusals=refused)
    result = run(WARM, observed=observed)
    # Not re-sent, and no other runner goes meanwhile: one at a time.
    assert refreshes(result) == []
    (held,) = result.held
    assert held.write == f"refresh runner r0 of ci ({scaleset.name})"
    assert not held.refusal.blocked
    assert result.wake == held.refusal.retry_at


def test_a_refresh_is_remembered_apart_from_a_force_removal():
    scaleset = current()
    forced = RemoveInstance("r0", scaleset.id, scaleset.name, "ci")
    assert refresh("r0", scaleset).asks() == [(f"refresh:{scaleset.name}:r0", "")]
    assert forced.asks() == [(f"remove:{scaleset.name}:r0", "")]
    assert forced.force and forced != refresh("r0", scaleset)


# --- whole passes against the GARM double -----------------------------------------------


def warm_pool(passes: Passes, garm: GarmDouble, spec: ScalesetSpec = WARM) -> list[str]:
    """``spec`` served, its warm pool idle; the names of its runners, oldest first."""
    passes.run(spec)
    for _ in range(3):
        passes.later()  # GARM makes the runners, they boot, they report idle
        passes.run(spec)
    idle = sorted(
        (i["created_at"], i["name"]) for i in garm.instances() if i["runner_status"] == "idle"
    )
    assert len(idle) == spec.min_idle_runners
    return [name for _, name in idle]


def idle_count(garm: GarmDouble) -> int:
    return sum(i["status"] == "running" and i["runner_status"] == "idle" for i in garm.instances())


def refresh_until_done(passes: Passes, garm: GarmDouble, spec: ScalesetSpec, passes_at_most=30):
    """Passes every 30 s until nothing is refreshing; every removal the double took.

    Checks on the way what a refresh must never do: remove more than one runner of a
    scaleset in a pass, force one, or leave fewer than ``min_idle`` - 1 idle.
    """
    removed: list[str] = []
    for _ in range(passes_at_most):
        before = len(garm.removals)
        outcome = passes.run(spec)
        taken = garm.removals[before:]
        assert len(taken) <= 1
        assert not any(force for *_, force in taken)
        removed += [name for name, *_ in taken]
        assert idle_count(garm) >= spec.min_idle_runners - 1
        if not any(p.phase is Phase.REFRESHING for p in outcome.progress):
            return removed
        passes.later()
        assert idle_count(garm) >= spec.min_idle_runners - 1
    raise AssertionError(f"still refreshing after {passes_at_most} passes: {removed}")


def test_a_warm_pool_of_three_is_refreshed_one_at_a_time_after_an_image_change(passes, garm):
    old = warm_pool(passes, garm)
    changed = dataclasses.replace(WARM, image="new-image")
    outcome = passes.run(changed)
    (scaleset,) = garm.scalesets()
    assert scaleset["image"] == "new-image"
    assert Notes.read(scaleset["extended_state"]).changed_at == passes.clock.now
    # Nothing goes before the margin is over; the status says what is coming.
    assert garm.removals == []
    assert [p.describe() for p in outcome.progress] == ["refreshing 3 idle runners"]
    passes.later(REFRESH_MARGIN)
    assert refresh_until_done(passes, garm, changed) == old
    # Once the last one is gone and its replacement up, every runner is one made after
    # the change, and the next pass writes nothing.
    for _ in range(3):
        passes.later()
    made = {i["name"] for i in garm.instances()}
    assert not made & set(old) and idle_count(garm) == 3
    passes.run(changed)
    assert passes.writes == []


def test_a_busy_runner_is_never_refreshed(passes, garm):
    oldest, *_ = warm_pool(passes, garm)
    (scaleset,) = garm.scalesets()
    garm.assign_jobs(scaleset["id"], 1)
    garm.start_job(oldest)
    for _ in range(3):
        passes.later()  # GARM makes one more for its warm capacity, and it boots
    changed = dataclasses.replace(WARM, image="new-image")
    passes.run(changed)
    passes.later(REFRESH_MARGIN)
    # The two others, and the one GARM made for the job, all made before the change.
    removed = refresh_until_done(passes, garm, changed)
    assert len(removed) == 3 and oldest not in removed
    assert oldest in {i["name"] for i in garm.instances()}  # still at its job


def test_nothing_is_refreshed_once_the_option_is_off(passes, garm):
    warm_pool(passes, garm)
    changed = dataclasses.replace(WARM, image="new-image")
    off = Settings(refresh_idle_runners=False)
    passes.run(changed, settings=off)
    for _ in range(5):
        passes.later(REFRESH_MARGIN)
        assert passes.run(changed, settings=off).progress == ()
    assert garm.removals == []


def test_a_template_changed_in_place_refreshes_the_idle_runners_too(passes, garm):
    spec = dataclasses.replace(WARM, template_blocks=blocks("echo one"))
    old = warm_pool(passes, garm, spec)
    changed = dataclasses.replace(spec, template_blocks=blocks("echo two"))
    outcome = passes.run(changed)
    # Only the template is written, the scaleset's notes say nothing of it, and the
    # refresh starts at once: GARM stamped the template's updated_at as it wrote it.
    assert [type(a) for a in outcome.done] == [UpdateTemplate, RemoveInstance]
    (scaleset,) = garm.scalesets()
    assert Notes.read(scaleset.get("extended_state", "")).changed_at is None
    first = [a.instance_name for a in outcome.done if isinstance(a, RemoveInstance)]
    passes.later()
    assert first + refresh_until_done(passes, garm, changed) == old


def test_a_runner_that_took_a_job_after_the_read_keeps_it_and_is_not_asked_again(passes, garm):
    oldest, *_ = warm_pool(passes, garm)
    changed = dataclasses.replace(WARM, image="new-image")
    passes.run(changed)
    passes.later(REFRESH_MARGIN)
    seen = reconciler.observe(passes.client)
    garm.start_job(oldest)  # GitHub hands it a job between the read and the delete

    def stale_pass():
        outcome = reconcile(
            passes.client,
            Desired((changed,)),
            passes.clock.now,
            SETTINGS,
            observed=seen,
            memory=passes.memory,
        )
        passes.memory = outcome.memory
        return outcome

    outcome = stale_pass()
    assert [(r.method, r.status) for r in garm.requests if r.method == "DELETE"] == [
        ("DELETE", 400)
    ]
    assert oldest in {i["name"] for i in garm.instances() if i["runner_status"] == "active"}
    (key,) = passes.memory.refusals
    assert key.startswith("refresh:")
    # A job that started is nothing for the operator: told as waiting, not blocked.
    (held,) = outcome.held
    assert not held.refusal.blocked
    assert held.write.startswith(f"refresh runner {oldest} of ci")
    # Within its back-off it is not sent again, even by a pass that still sees it idle.
    passes.later()
    stale_pass()
    assert sum(r.method == "DELETE" for r in garm.requests) == 1
    # A pass that reads GARM again sees it busy: nothing is asked of it.
    passes.run(changed)
    assert oldest not in [name for name, *_ in garm.removals]


# --- a state machine of warm pools, changes and jobs ------------------------------------

MIN_IDLE = 3
# Room for one runner beyond the warm pool: two jobs leave fewer idle than asked for.
POOL = make_spec(min_idle_runners=MIN_IDLE, max_runners=MIN_IDLE + 1)
# Two images and two pre-job scripts: a change in place, noted or seen on the template.
REFRESH_IMAGES = ("image-uuid", "image-uuid-2")
SCRIPTS = ("echo one", "echo two")
# What the stories reached, summed over the examples: the test asserts they refreshed.
COVERAGE: Counter[str] = Counter()


class WarmPool(RuleBasedStateMachine):
    """One warm scaleset, images and runner options changing, jobs coming and going.

    After every pass, what a refresh asked of GARM is judged against GARM as the pass
    found it: never a runner that was busy or booting, never one of a scaleset with a
    runner on its way in or out, one at most per pass, and only with ``min_idle_runners``
    idle runners, so a refresh leaves no fewer than ``min_idle_runners`` - 1.
    """

    def __init__(self, garm: GarmDouble, client, clock):
        super().__init__()
        self.garm, self.clock = garm, clock
        clock.now = T0
        garm.reset()
        garm.add_provider(POOL.provider_name)
        garm.add_org("example-org")
        self.passes = Passes(garm, client, clock)
        self.image, self.script = REFRESH_IMAGES[0], SCRIPTS[0]
        # Jobs GitHub assigned to the scale set, and those of them no runner took yet.
        self.jobs, self.queued = 0, 0

    def spec(self) -> ScalesetSpec:
        return dataclasses.replace(POOL, image=self.image, template_blocks=blocks(self.script))

    @initialize()
    def warm_up(self):
        for _ in range(4):
            self.reconcile()
            self.passes.later()

    @rule(image=st.sampled_from(REFRESH_IMAGES))
    def image_published(self, image):
        self.image = image

    @rule(script=st.sampled_from(SCRIPTS))
    def option_changed(self, script):
        self.script = script

    @rule()
    def job_queued(self):
        """GitHub assigns the scale set a job no runner has taken yet: GARM makes one more."""
        self.jobs, self.queued = self.jobs + 1, self.queued + 1
        self.assign()

    @rule(data=st.data())
    def job_taken(self, data):
        """GitHub hands an idle runner a job, a queued one or a new one."""
        idle = [i["name"] for i in self.garm.instances() if _idle(i)]
        if idle:
            self.take(data.draw(st.sampled_from(idle)))

    @rule(data=st.data())
    def job_done(self, data):
        busy = [i["name"] for i in self.garm.instances() if i["runner_status"] == "active"]
        if busy:
            self.garm.finish_job(data.draw(st.sampled_from(busy)))
            self.jobs -= 1
            self.assign()

    @rule(delta=st.sampled_from((timedelta(seconds=5), timedelta(seconds=30), REFRESH_MARGIN)))
    def time_passes(self, delta):
        self.passes.later(delta)

    @rule()
    def reconcile(self):
        self.check(lambda: self.passes.run(self.spec()))

    @rule(times=st.integers(1, 6))
    def timer_fires(self, times):
        """30 s pass, GARM ticks, the timer runs a pass; a few times over."""
        for _ in range(times):
            self.passes.later()
            self.reconcile()

    @rule(takes_one=st.booleans())
    def read_then_a_job_starts(self, takes_one):
        """Time passes, GARM working, until a pass would refresh a runner (a few minutes at
        most); the charm reads GARM, then GitHub hands that runner a job (or GARM works
        on): the pass acts on what it read."""
        stale, due = reconciler.observe(self.passes.client), []
        for _ in range(8):
            self.passes.later()
            stale = reconciler.observe(self.passes.client)
            told = rehearse(
                self.passes.client,
                Desired((self.spec(),)),
                self.clock.now,
                SETTINGS,
                self.passes.memory,
                observed=stale,
            )
            due = [a.instance_name for a in told.done if isinstance(a, RemoveInstance)]
            if due:
                break
        if takes_one and due:
            self.take(due[0])
        else:
            self.garm.tick()

        def stale_pass():
            outcome = reconcile(
                self.passes.client,
                Desired((self.spec(),)),
                self.clock.now,
                SETTINGS,
                observed=stale,
                memory=self.passes.memory,
            )
            self.passes.memory = outcome.memory

        self.check(stale_pass, {i.name: i for i in stale.instances})

    def take(self, name: str) -> None:
        """The runner starts a job: a queued one, else one GitHub assigns now."""
        if self.queued:
            self.queued -= 1
        else:
            self.jobs += 1
            self.assign()
        self.garm.start_job(name)

    def assign(self) -> None:
        (scaleset,) = self.garm.scalesets()
        self.garm.assign_jobs(scaleset["id"], self.jobs)

    def check(self, run_pass, seen: dict[str, Instance] | None = None) -> None:
        """Run a pass; judge its refreshes against GARM as the pass read it."""
        at_read = seen or {i["name"]: Instance.from_json(i) for i in self.garm.instances()}
        truth = {i["name"]: i for i in self.garm.instances()}
        start = len(self.garm.requests)
        run_pass()
        asked = [
            r.path.rstrip("/").removeprefix("/instances/")
            for r in self.garm.requests[start:]
            if r.method == "DELETE"
            and r.path.startswith("/instances/")
            and r.query.get("forceRemove") != "true"
        ]
        assert len(asked) <= 1, f"{asked} refreshed in one pass"
        for name in asked:
            runner = at_read[name]
            assert runner.is_idle, (
                f"refresh asked for {name}, {runner.status}/{runner.runner_status}"
            )
            idle = sum(i.is_idle for i in at_read.values())
            assert idle >= MIN_IDLE, f"refresh of {name} with {idle} idle runners"
            moving = [
                i.name
                for i in at_read.values()
                if i.status in COMING_OR_GOING
                or (i.runner_status in ("pending", "installing") and i.status != "error")
            ]
            assert not moving, f"refresh of {name} while {moving} come or go"
            # Whatever GitHub said, no runner that was busy at the delete is gone.
            busy_then = truth.get(name, {}).get("runner_status") == "active"
            removed = name in {n for n, *_ in self.garm.removals}
            assert not (busy_then and removed), f"busy runner {name} removed"
            COVERAGE["refused, a job started"] += busy_then
            COVERAGE["refreshed"] += removed
        if asked:
            # No fewer than min_idle - 1 idle once the refresh took its runner.
            assert sum(_idle(i) for i in self.garm.instances()) >= MIN_IDLE - 1

    def teardown(self):
        """Jobs end, time passes as the timer lets it: no idle runner made before the last
        change is left, and the warm pool is whole again."""
        self.jobs = self.queued = 0
        for _ in range(60):
            for name in [
                i["name"] for i in self.garm.instances() if i["runner_status"] == "active"
            ]:
                self.garm.finish_job(name)
            self.assign()
            self.passes.later()
            self.reconcile()
            if (
                not self.passes.outcome.progress
                and sum(map(_idle, self.garm.instances())) >= MIN_IDLE
            ):
                break
        assert not self.passes.outcome.progress, self.passes.outcome.progress
        COVERAGE["settled"] += 1


def _idle(instance: dict) -> bool:
    return instance["status"] == "running" and instance["runner_status"] == "idle"


def test_refreshes_never_take_a_busy_runner_nor_warm_capacity_below_min_idle_minus_one(
    garm, client, clock
):
    class OnThisGarm(WarmPool):
        def __init__(self):
            super().__init__(garm, client, clock)

    COVERAGE.clear()
    run_state_machine_as_test(OnThisGarm, settings=soak_settings(40, 30))
    # The stories must have refreshed, and met a runner that took a job meanwhile.
    assert COVERAGE["refreshed"] and COVERAGE["refused, a job started"], dict(COVERAGE)
