"""When a plan says a pass can next make progress (``Plan.wake``), moment by moment.

Each row is a changeover waiting on one thing the planner knows the time of (a listener
opening, a hand-over timeout, a drain deadline, a runner's grace in ``pending_delete``,
the youngest a scaleset may be deleted, a back-off) or expects soon without a moment (a
runner booting, a retired scaleset's runners being scaled down). A settled GARM, and a
drain that waits only on a job, wake nothing: the periodic timer is enough.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from garm.refusals import Refusals, digest, first_refusal
from scalesets.actions import Observed
from scalesets.notes import Notes
from scalesets.planner import (
    LISTENER_STARTUP,
    PENDING_DELETE_GRACE,
    STUCK_RUNNER,
    YOUNGEST_DELETE,
)
from scalesets.spec import Settings
from scalesets.wake import SOON_FIRST, SOON_LONGEST
from tests.plans import NOW, generation, observe, retired, run, runner
from tests.specs import make_spec

OLD = make_spec(labels=("linux", "x64"))
NEW = make_spec(labels=("linux", "arm64"))
WARM = make_spec(labels=("linux", "arm64"), min_idle_runners=1)
LONG_AGO = NOW - timedelta(days=2)


def changeover(spec, *, created, runners=()):
    """An old generation still serving, and ``spec``'s generation created at ``created``
    with ``runners`` (each the keywords of one runner of it)."""
    old = generation(OLD, 1, created_at=LONG_AGO)
    new = generation(spec, 2, created_at=created)
    instances = [runner(f"r{i}", new, **kw) for i, kw in enumerate(runners)]
    return old, new, observe(old, new, instances=instances)


def booting(status: str, age: timedelta) -> dict:
    return {"runner_status": status, "created_at": NOW - age}


def test_a_settled_scaleset_wakes_nothing():
    current = generation(NEW, 1, created_at=LONG_AGO)

    assert run(NEW, observed=observe(current)).wake is None


def test_a_new_generation_wakes_the_pass_when_its_listener_is_counted_open():
    created = NOW - timedelta(seconds=2)
    _, _, observed = changeover(NEW, created=created)

    result = run(NEW, observed=observed)

    assert result.actions == ()  # nothing to do before then
    assert result.wake == created + LISTENER_STARTUP


def test_a_create_wakes_the_pass_at_its_listener_too():
    """The plan after the create's answer is folded in: the new one is just made."""
    old = generation(OLD, 1, created_at=LONG_AGO)
    new = generation(NEW, 2, created_at=NOW)

    assert run(NEW, observed=observe(old, new)).wake == NOW + LISTENER_STARTUP


def test_a_warm_generation_waits_on_its_booting_runner_soon_and_on_the_timeout():
    created = NOW - timedelta(seconds=20)
    booting_runner = booting("pending", timedelta(seconds=6))
    _, _, observed = changeover(WARM, created=created, runners=[booting_runner])

    result = run(WARM, observed=observed)

    assert result.actions == ()
    assert result.wake == NOW + SOON_FIRST


def test_a_runner_that_boots_long_is_looked_at_less_often_but_at_least_each_minute():
    created = NOW - timedelta(minutes=20)
    slow = booting("installing", timedelta(seconds=90))
    _, _, observed = changeover(WARM, created=created, runners=[slow])
    assert run(WARM, observed=observed).wake == NOW + timedelta(seconds=9)

    older = booting("pending", timedelta(minutes=10))
    _, _, observed = changeover(WARM, created=created, runners=[older])
    assert run(WARM, observed=observed).wake == NOW + SOON_LONGEST


def test_the_hand_over_timeout_wakes_the_pass_when_it_comes_first():
    settings = Settings(handover_timeout=timedelta(minutes=30))
    created = NOW - timedelta(minutes=29, seconds=59)
    older = booting("pending", timedelta(minutes=10))
    _, _, observed = changeover(WARM, created=created, runners=[older])

    assert run(WARM, observed=observed, settings=settings).wake == created + timedelta(minutes=30)


def test_a_warm_generation_with_no_runner_yet_is_expected_to_get_one_soon():
    created = NOW - timedelta(seconds=12)
    _, _, observed = changeover(WARM, created=created)

    assert run(WARM, observed=observed).wake == NOW + SOON_FIRST


def test_a_retired_scaleset_with_a_busy_runner_wakes_at_the_drain_deadline_only():
    current = generation(NEW, 2, created_at=LONG_AGO)
    old = retired(generation(OLD, 1, created_at=LONG_AGO))
    busy = runner("r1", old, runner_status="active")
    settings = Settings(drain_deadline=timedelta(hours=7))

    result = run(NEW, observed=observe(current, old, instances=[busy]), settings=settings)

    retired_at = Notes.read(old.extended_state).retired_at
    assert retired_at is not None and result.wake == retired_at + timedelta(hours=7)
    # No deadline, no moment: the job's end is GitHub's to tell.
    no_deadline = Settings(drain_deadline=timedelta(0))
    assert (
        run(NEW, observed=observe(current, old, instances=[busy]), settings=no_deadline).wake
        is None
    )


def test_a_retired_scaleset_with_an_idle_runner_expects_garm_to_scale_it_down_soon():
    current = generation(NEW, 2, created_at=LONG_AGO)
    old = retired(generation(OLD, 1, created_at=LONG_AGO), at=NOW - timedelta(seconds=1))
    idle = runner("r1", old, runner_status="idle")

    assert run(NEW, observed=observe(current, old, instances=[idle])).wake == NOW + SOON_FIRST


def test_a_runner_in_pending_delete_wakes_the_pass_at_the_end_of_its_grace():
    current = generation(NEW, 2, created_at=LONG_AGO)
    seen = NOW - timedelta(minutes=1)
    stamp = Notes(retired_at=NOW - timedelta(hours=1)).seeing([("r1", "pending_delete")], seen)
    old = dataclasses.replace(
        retired(generation(OLD, 1, created_at=LONG_AGO)), extended_state=stamp.text()
    )
    going = runner("r1", old, status="pending_delete", runner_status="active")
    settings = Settings(drain_deadline=timedelta(0))

    result = run(NEW, observed=observe(current, old, instances=[going]), settings=settings)

    # GARM reaps it within seconds as a rule: looked at each minute, an hour after the
    # retirement, until its grace ends (then it is forced).
    assert result.wake == NOW + SOON_LONGEST < seen + PENDING_DELETE_GRACE
    long_seen = Notes(retired_at=NOW - timedelta(hours=1)).seeing(
        [("r1", "pending_delete")], NOW - PENDING_DELETE_GRACE + timedelta(seconds=20)
    )
    nearly = dataclasses.replace(old, extended_state=long_seen.text())
    result = run(NEW, observed=observe(current, nearly, instances=[going]), settings=settings)
    assert result.wake == NOW + timedelta(seconds=20)  # the grace's end comes first


def test_a_runner_garm_will_not_remove_wakes_nothing_once_named():
    """Past the deadline, a runner stuck ``creating`` is named to the operator after
    ``STUCK_RUNNER``; after that nothing about it is due, and no pass is asked for."""
    current = generation(NEW, 2, created_at=LONG_AGO)
    seen = NOW - STUCK_RUNNER - timedelta(minutes=10)
    notes = Notes(retired_at=NOW - timedelta(hours=8)).seeing([("r1", "creating")], seen)
    old = dataclasses.replace(
        retired(generation(OLD, 1, created_at=LONG_AGO)), extended_state=notes.text()
    )
    stuck = runner("r1", old, status="creating", runner_status="pending")

    result = run(NEW, observed=observe(current, old, instances=[stuck]))

    assert any(p.blocked for p in result.progress)
    assert result.wake is None


def test_a_young_empty_retired_scaleset_wakes_the_pass_when_it_may_be_deleted():
    current = generation(NEW, 2, created_at=LONG_AGO)
    created = NOW - timedelta(seconds=5)
    young = retired(generation(OLD, 1, created_at=created))

    result = run(NEW, observed=observe(current, young))

    assert result.actions == ()
    assert result.wake == created + YOUNGEST_DELETE


def test_a_write_held_by_its_back_off_wakes_the_pass_when_the_back_off_ends():
    current = generation(NEW, 2, created_at=LONG_AGO)
    old = generation(OLD, 1, created_at=LONG_AGO)
    asked = digest({"enabled": False, "max_runners": 0})
    refusal = first_refusal(asked, NOW - timedelta(seconds=10), "no", permanent=False)
    observed = dataclasses.replace(
        observe(current, old), refusals=Refusals({f"retire:{old.name.lower()}": refusal})
    )

    result = run(NEW, observed=observed)

    assert result.actions == ()
    assert [h.write for h in result.held] == [f"retire scaleset ci ({old.name})"]
    assert result.wake == refusal.retry_at


def test_of_several_moments_the_earliest_wakes_the_pass():
    """A new generation waiting for its listener beside a young retired one."""
    created = NOW - timedelta(seconds=8)
    other = make_spec(name="other", labels=("gpu",))
    other_current = generation(other, 3, created_at=LONG_AGO)
    young = retired(
        generation(
            make_spec(name="other", labels=("cpu",)), 4, created_at=NOW - timedelta(seconds=29)
        )
    )
    old, new, _ = changeover(NEW, created=created)
    observed = Observed(
        (old, new, other_current, young), (), observe().providers, observe().entities
    )

    result = run(NEW, other, observed=observed)

    assert result.wake == NOW + timedelta(
        seconds=1
    )  # the young one's 30 s, before the listener's 10


def test_a_new_scaleset_with_nothing_to_hand_over_from_wakes_nothing():
    """Its listener opening changes nothing the charm does: no pass for it."""
    new = generation(NEW, 2, created_at=NOW - timedelta(seconds=2))

    result = run(NEW, observed=observe(new))

    assert result.progress == () and result.wake is None
