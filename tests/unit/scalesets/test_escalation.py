"""What will not resolve by itself: the planner's rules for it, one table at a time.

Each escalation is checked the same four ways: it blocks (naming the cause and what to
do), it stops costing calls on every pass (back-off, in the one memory of what GARM
refused: ``garm.refusals``), it retries once the back-off is over, and it clears when
the cause goes away. Plus the two timing rules of issue #10: a generation is live only
once its listener can be up, and a scaleset is never deleted so young that GARM's worker
may not have started.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from garm.models import Instance, ScaleSet
from garm.refusals import (
    FIRST_RETRY,
    LONGEST_RETRY,
    REFUSALS_BEFORE_BLOCKED,
    Refusal,
    Refusals,
    backoff,
    first_refusal,
    request_digest,
)
from scalesets.actions import (
    KEPT_CAUSE,
    CreateScaleset,
    DeleteScaleset,
    Observed,
    Phase,
    RemoveInstance,
    UpdateScaleset,
)
from scalesets.naming import spec_key
from scalesets.notes import Notes, Seen, specs_digest
from scalesets.planner import (
    LISTENER_STARTUP,
    PENDING_DELETE_GRACE,
    STUCK_RUNNER,
    YOUNGEST_DELETE,
    create_body,
)
from tests.plans import (
    NOW,
    RETIRED_AT,
    SETTINGS,
    generation,
    name_of,
    observe,
    retired,
    run,
    runner,
    writes,
)
from tests.specs import make_spec
from tests.wire import go_time, instance_json

OLD = make_spec(labels=("linux", "x64"))
NEW = make_spec(labels=("linux", "arm64"))


def drained(**notes) -> ScaleSet:
    """A retired predecessor with the given notes (retired an hour ago by default)."""
    values = {"retired_at": RETIRED_AT, **notes}
    return dataclasses.replace(retired(generation(OLD, 1)), extended_state=Notes(**values).text())


def with_current(*others: ScaleSet, instances=(), **extra) -> Observed:
    current = generation(NEW, 2, created_at=NOW - timedelta(hours=2))
    return dataclasses.replace(observe(current, *others, instances=instances), **extra)


def refusing(
    key: str,
    *,
    asked: str = "",
    refusals: int = 1,
    retry_at=None,
    cause: str = "refused",
    permanent: bool = False,
) -> Refusals:
    """A memory holding one write's refusals (its back-off from now by default)."""
    at = NOW + backoff(refusals) if retry_at is None else retry_at
    return Refusals({key: Refusal(asked, refusals, at, cause, permanent)})


# --- live means listening ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "retires"),
    [
        (timedelta(0), False),
        (LISTENER_STARTUP - timedelta(seconds=1), False),
        (LISTENER_STARTUP, True),
    ],
)
def test_a_new_generation_takes_over_only_once_its_listener_can_be_up(age, retires):
    old = generation(OLD, 1)
    new = generation(NEW, 2, created_at=NOW - age)
    result = run(NEW, observed=observe(old, new))
    retirements = [a for a in writes(result) if isinstance(a, UpdateScaleset)]
    assert bool(retirements) is retires
    if not retires:
        assert result.progress[0].phase is Phase.HANDING_OVER


# --- never delete a scaleset GARM's worker may not have seen ------------------------------


@pytest.mark.parametrize(
    ("age", "deleted"), [(timedelta(seconds=5), False), (YOUNGEST_DELETE, True)]
)
def test_a_young_retired_scaleset_is_deleted_only_once_old_enough(age, deleted):
    young = dataclasses.replace(drained(), created_at=NOW - age)
    result = run(NEW, observed=with_current(young))
    assert (DeleteScaleset(1, young.name) in writes(result)) is deleted
    assert result.progress[0].phase is Phase.AWAITING_DELETION


# --- a delete GARM answered but did not do ----------------------------------------------


def test_a_kept_delete_waits_out_its_back_off_then_is_tried_again():
    old = drained()
    kept = refusing(f"delete:{old.name.lower()}", cause=KEPT_CAUSE)
    result = run(NEW, observed=with_current(old, refusals=kept))
    assert writes(result) == []
    assert result.progress[0].blocked == ""
    later = NOW + FIRST_RETRY
    assert writes(run(NEW, observed=with_current(old, refusals=kept), now=later)) == [
        DeleteScaleset(1, old.name)
    ]


def test_deletes_kept_again_and_again_block_naming_the_scaleset():
    old = drained()
    kept = refusing(
        f"delete:{old.name.lower()}", cause=KEPT_CAUSE, refusals=REFUSALS_BEFORE_BLOCKED
    )
    result = run(NEW, observed=with_current(old, refusals=kept))
    (progress,) = result.progress
    assert (
        f"GARM kept scaleset {old.name} after {REFUSALS_BEFORE_BLOCKED} deletes"
        in progress.blocked
    )
    assert "delete it on GitHub" in progress.blocked
    # Still retried after the back-off, so it clears by itself once GitHub lets go.
    later = NOW + backoff(REFUSALS_BEFORE_BLOCKED)
    assert DeleteScaleset(1, old.name) in writes(
        run(NEW, observed=with_current(old, refusals=kept), now=later)
    )
    assert run(NEW, observed=with_current()).progress == ()


def test_an_orphan_kept_by_garm_blocks_too():
    orphan = dataclasses.replace(drained(), name="legacy")
    kept = refusing("delete:legacy", cause=KEPT_CAUSE, refusals=REFUSALS_BEFORE_BLOCKED)
    (progress,) = run(NEW, observed=with_current(orphan, refusals=kept)).progress
    assert progress.logical_name is None and "GARM kept scaleset legacy" in progress.blocked


def test_a_delete_refused_outright_is_not_told_as_kept():
    # A 4xx to the DELETE itself is a refusal like any other (told as held), not GitHub
    # keeping the scaleset behind GARM's 200.
    old = drained()
    refused = refusing(f"delete:{old.name.lower()}", cause="scale set is busy", permanent=True)
    result = run(NEW, observed=with_current(old, refusals=refused))
    assert writes(result) == [] and result.progress[0].blocked == ""
    (held,) = result.held
    assert held.refusal.blocked and held.refusal.cause == "scale set is busy"


# --- runners: failed ones go at once, refusals back off, stuck ones are named ------------


@pytest.mark.parametrize(
    ("status", "runner_status", "removed"),
    [
        ("error", "", True),
        ("running", "failed", True),
        ("running", "idle", False),
        ("running", "active", False),
        ("creating", "pending", False),
    ],
)
def test_failed_runners_of_a_retired_scaleset_go_before_the_deadline(
    status, runner_status, removed
):
    old = drained()
    held = runner("garm-1", old, status=status, runner_status=runner_status)
    result = run(NEW, observed=with_current(old, instances=[held]))
    assert (RemoveInstance("garm-1", 1, old.name) in writes(result)) is removed


def test_a_refused_force_removal_is_not_resent_until_the_back_off_ends():
    old = drained(retired_at=NOW - SETTINGS.drain_deadline)
    busy = runner("garm-1", old, runner_status="active")
    refused = refusing(f"remove:{old.name.lower()}:garm-1")
    result = run(NEW, observed=with_current(old, instances=[busy], refusals=refused))
    assert writes(result) == []
    # Nothing is sent while it waits: the status says draining, not force-removing.
    assert result.progress[0].describe() == "draining 1 runner"
    (held,) = result.held
    assert held.write == f"force-remove runner garm-1 of ci ({old.name})"
    later = run(
        NEW, observed=with_current(old, instances=[busy], refusals=refused), now=NOW + FIRST_RETRY
    )
    assert writes(later) == [RemoveInstance("garm-1", 1, old.name)]


def old_retired(scaleset: ScaleSet):
    return Notes.read(scaleset.extended_state).retired_at


def test_a_refused_removal_holds_back_no_other_runner():
    # Runner garm-1's job still runs (GitHub refused its removal); garm-2 failed: it goes
    # at once, whatever garm-1's back-off says.
    old = drained(retired_at=NOW - SETTINGS.drain_deadline)
    busy = runner("garm-1", old, runner_status="active")
    broken = runner("garm-2", old, status="error", runner_status="")
    refused = refusing(f"remove:{old.name.lower()}:garm-1", permanent=True)
    result = run(NEW, observed=with_current(old, instances=[busy, broken], refusals=refused))
    assert writes(result) == [RemoveInstance("garm-2", 1, old.name)]
    assert [h.write for h in result.held] == [f"force-remove runner garm-1 of ci ({old.name})"]


def test_removals_refused_again_and_again_block_with_what_to_do():
    old = drained(retired_at=NOW - SETTINGS.drain_deadline)
    busy = runner("garm-1", old, runner_status="active")
    refused = refusing(f"remove:{old.name.lower()}:garm-1", refusals=REFUSALS_BEFORE_BLOCKED)
    (progress,) = run(NEW, observed=with_current(old, instances=[busy], refusals=refused)).progress
    assert progress.phase is Phase.DRAINING
    assert "drain-deadline-minutes" in progress.blocked


def test_a_removal_github_will_refuse_again_blocks_at_once():
    # GitHub's 400 (the job still runs) says the next one is refused too: told at once.
    old = drained(retired_at=NOW - SETTINGS.drain_deadline)
    busy = runner("garm-1", old, runner_status="active")
    refused = refusing(f"remove:{old.name.lower()}:garm-1", permanent=True)
    (progress,) = run(NEW, observed=with_current(old, instances=[busy], refusals=refused)).progress
    assert "GARM refused once to remove runner garm-1 of" in progress.blocked


@pytest.mark.parametrize(
    ("unchanged", "blocked"), [(STUCK_RUNNER, True), (timedelta(minutes=5), False)]
)
def test_a_runner_garm_will_not_remove_is_named_past_the_deadline(unchanged, blocked):
    # How long it sat there is how long this charm has seen it so (noted on the scaleset).
    seen = (Seen("garm-9", "creating", NOW - unchanged),)
    old = drained(retired_at=NOW - SETTINGS.drain_deadline, seen=seen)
    stuck = runner("garm-9", old, status="creating", runner_status="pending", created_at=NOW)
    result = run(NEW, observed=with_current(old, instances=[stuck]))
    assert writes(result) == []  # GARM refuses a delete from "creating": none is sent
    (progress,) = result.progress
    assert ("garm-9 (creating)" in progress.blocked) is blocked


def test_a_runner_stuck_before_the_deadline_is_left_to_drain():
    old = drained()
    stuck = runner("garm-9", old, status="creating", created_at=NOW - timedelta(days=1))
    (progress,) = run(NEW, observed=with_current(old, instances=[stuck])).progress
    assert (progress.phase, progress.blocked) == (Phase.DRAINING, "")


# --- creates GitHub refuses --------------------------------------------------------------


def refusal_for(spec, *, index=0, **fields) -> Refusals:
    body = create_body(spec, name_of(spec, index), spec_key(spec))
    values = {
        "asked": request_digest(body),
        "cause": "Runner group x not found",
        "permanent": True,
        "retry_at": NOW + FIRST_RETRY,
    }
    values.update(fields)
    return refusing(f"create:{spec.name.lower()}", **values)


def test_a_refused_create_waits_out_its_back_off_and_blocks_naming_the_unit():
    old = generation(OLD, 1)
    result = run(NEW, observed=dataclasses.replace(observe(old), refusals=refusal_for(NEW)))
    assert writes(result) == []
    (skipped,) = result.skipped
    assert (skipped.source, skipped.blocking) == ("garm-configurator/0", True)
    assert "its create was refused (once): Runner group x not found" in skipped.reason
    # The old generation keeps serving meanwhile, and no progress says a replacement is
    # being created while its create is held back.
    assert result.progress == ()


def test_a_transient_refusal_waits_without_blocking_until_it_repeats():
    refusals = refusal_for(NEW, permanent=False)
    (skipped,) = run(NEW, observed=dataclasses.replace(observe(), refusals=refusals)).skipped
    assert not skipped.blocking
    again = refusal_for(NEW, permanent=False, refusals=REFUSALS_BEFORE_BLOCKED)
    (skipped,) = run(NEW, observed=dataclasses.replace(observe(), refusals=again)).skipped
    assert skipped.blocking


def test_a_refused_create_is_retried_after_its_back_off_or_at_once_when_the_request_changes():
    refusals = refusal_for(NEW)
    after = run(
        NEW, observed=dataclasses.replace(observe(), refusals=refusals), now=NOW + FIRST_RETRY
    )
    assert [type(a) for a in writes(after)] == [CreateScaleset]
    fixed = dataclasses.replace(NEW, runner_group="runners")
    changed = run(fixed, observed=dataclasses.replace(observe(), refusals=refusals))
    assert [type(a) for a in writes(changed)] == [CreateScaleset]


def test_a_name_github_holds_moves_the_create_to_the_next_candidate():
    taken = frozenset({name_of(NEW, 0).lower()})
    (create,) = writes(run(NEW, observed=dataclasses.replace(observe(), taken=taken)))
    assert isinstance(create, CreateScaleset) and create.name == name_of(NEW, 1)


def test_the_digest_of_a_create_ignores_the_name_it_moves_on_from():
    key = spec_key(NEW)
    assert request_digest(create_body(NEW, "a", key)) == request_digest(create_body(NEW, "b", key))
    assert request_digest(create_body(NEW, "a", key)) != request_digest(
        create_body(dataclasses.replace(NEW, flavor="m1.large"), "a", key)
    )


def test_the_memory_survives_the_databag_and_garbage_is_dropped():
    memory = Refusals(
        {
            "create:ci": first_refusal("abc", NOW, "cause", True),
            "update:ci-24ec4a:runner_group": first_refusal("def", NOW, "404", True),
        },
        {"ci-24ec4a": NOW + FIRST_RETRY},
    )
    assert Refusals.read(memory.text()) == memory
    for text in (
        None,
        "",
        "not json",
        "[]",
        '{"refusals": {"ci": 3}}',
        '{"refusals": {"ci": {"refusals": 1}}}',
        '{"taken": {"x": "never"}}',
        '{"refusals": [], "taken": []}',
        "[" * 100_000,
    ):
        assert Refusals.read(text) == Refusals()


def test_taken_names_are_remembered_for_an_hour_and_a_far_future_is_not_believed():
    memory = Refusals(taken={"a": NOW + LONGEST_RETRY, "b": NOW + timedelta(days=3)})
    assert memory.taken_now(NOW) == {"a"}
    assert memory.taken_now(NOW + LONGEST_RETRY) == frozenset()
    assert memory.current(NOW + LONGEST_RETRY) == Refusals()


def test_a_refusal_not_renewed_an_hour_past_its_retry_is_forgotten():
    # A write still wanted is sent again once its back-off ends, and refused or accepted;
    # one nobody sent again for an hour after that is nobody's any more.
    memory = refusing("update:ci-24ec4a:image", retry_at=NOW)
    assert memory.current(NOW + LONGEST_RETRY) == memory
    assert memory.current(NOW + LONGEST_RETRY + timedelta(seconds=1)) == Refusals()


def test_a_refusal_counts_up_for_the_same_request_and_starts_again_for_another():
    memory = Refusals().refused("k", "a", NOW, "no", permanent=False)
    memory = memory.refused("k", "a", NOW, "no", permanent=False)
    assert memory.refusals["k"].refusals == 2
    assert memory.refusals["k"].retry_at == NOW + backoff(2)
    memory = memory.refused("k", "b", NOW, "no", permanent=False)
    assert memory.refusals["k"].refusals == 1
    assert memory.holding("k", "a", NOW) is None  # asked for something else now
    assert memory.accepted("k") == Refusals()


# --- extra_specs GARM's list leaves out -------------------------------------------------


def test_extra_specs_left_out_of_the_list_are_judged_by_the_noted_digest():
    spec = make_spec(extra_specs={"pre_install_scripts": {"a": "eA=="}})
    noted = Notes(specs=specs_digest(spec.extra_specs)).text()
    unknown = generation(spec, 1, extra_specs=None, extended_state=noted)
    assert unknown.extra_specs is None
    assert writes(run(spec, observed=observe(unknown))) == []


def test_extra_specs_left_out_and_never_noted_are_set_once_with_their_digest():
    spec = make_spec(extra_specs={"a": 1})
    unknown = generation(spec, 1, extra_specs=None)
    (update,) = writes(run(spec, observed=observe(unknown)))
    assert update == UpdateScaleset(
        1,
        unknown.name,
        {
            "extra_specs": {"a": 1},
            # Whether GARM held them already cannot be told: noted as a change
            # (docs/adr/0010), which at worst replaces the idle runners once.
            "extended_state": Notes(changed_at=NOW, specs=specs_digest({"a": 1})).text(),
        },
        "update",
    )


def test_a_spec_without_extra_specs_needs_none_noted():
    assert (
        writes(run(make_spec(), observed=observe(generation(make_spec(), 1, extra_specs=None))))
        == []
    )


# --- the notes themselves -----------------------------------------------------------------


def test_a_retry_time_further_ahead_than_the_longest_back_off_is_not_believed():
    old = drained()
    far = refusing(
        f"delete:{old.name.lower()}", cause=KEPT_CAUSE, retry_at=NOW + timedelta(days=3650)
    )
    assert writes(run(NEW, observed=with_current(old, refusals=far))) == [
        DeleteScaleset(1, old.name)
    ]
    refusals = refusal_for(NEW, retry_at=NOW + timedelta(days=3650))
    observed = dataclasses.replace(observe(), refusals=refusals)
    assert [type(a) for a in writes(run(NEW, observed=observed))] == [CreateScaleset]


def test_refused_force_removals_do_not_hold_back_the_delete_once_the_runners_are_gone():
    old = drained()
    refused = refusing(
        f"remove:{old.name.lower()}:garm-1", refusals=6, retry_at=NOW + timedelta(minutes=50)
    )
    result = run(NEW, observed=with_current(old, refusals=refused))
    assert writes(result) == [DeleteScaleset(1, old.name)]
    assert result.progress[0].blocked == ""


def test_refusals_to_remove_failed_runners_say_so_not_to_raise_the_deadline():
    old = drained()
    refused = refusing(f"remove:{old.name.lower()}:garm-1", refusals=3, retry_at=NOW)
    failed = runner("garm-1", old, status="error", runner_status="")
    (progress,) = run(
        NEW, observed=with_current(old, instances=[failed], refusals=refused)
    ).progress
    assert "that failed" in progress.blocked and "drain-deadline" not in progress.blocked


@pytest.mark.parametrize(
    ("sat", "removed"), [(timedelta(minutes=1), False), (PENDING_DELETE_GRACE, True)]
)
def test_a_runner_on_garms_own_way_out_is_forced_only_once_it_sat_there(sat, removed):
    seen = (Seen("garm-1", "pending_delete", NOW - sat),)
    old = drained(retired_at=NOW - SETTINGS.drain_deadline, seen=seen)
    # GARM re-stamps updated_at on every retry of a delete its provider fails: a second ago.
    going = runner("garm-1", old, status="pending_delete", created_at=NOW - timedelta(hours=2))
    going = dataclasses.replace(going, updated_at=NOW - timedelta(seconds=1))
    result = run(NEW, observed=with_current(old, instances=[going]))
    assert (RemoveInstance("garm-1", 1, old.name) in writes(result)) is removed


def test_a_runner_first_seen_on_its_way_out_is_noted_not_forced():
    old = drained(retired_at=NOW - SETTINGS.drain_deadline)
    data = instance_json("garm-1", 1, status="pending_delete", created_at=NOW - timedelta(days=1))
    data["updated_at"] = go_time(NOW - timedelta(hours=1))  # how old it says: not believed
    going = Instance.from_json(data)
    result = run(NEW, observed=with_current(old, instances=[going]))
    noted = Notes(retired_at=old_retired(old), seen=(Seen("garm-1", "pending_delete", NOW),))
    assert writes(result) == [
        UpdateScaleset(1, old.name, {"extended_state": noted.text()}, "note")
    ]
    assert result.progress[0].describe() == "draining 1 runner"  # no removal sent, none said


def test_a_runner_that_moved_on_is_seen_afresh_in_its_new_status():
    seen = (Seen("garm-1", "pending_delete", NOW - timedelta(hours=1)),)
    old = drained(retired_at=NOW - SETTINGS.drain_deadline, seen=seen)
    moving = runner("garm-1", old, status="deleting", created_at=NOW - timedelta(days=1))
    result = run(NEW, observed=with_current(old, instances=[moving]))
    noted = Notes(retired_at=old_retired(old), seen=(Seen("garm-1", "deleting", NOW),))
    assert writes(result) == [
        UpdateScaleset(1, old.name, {"extended_state": noted.text()}, "note")
    ]
    assert result.progress[0].blocked == ""  # its 30 minutes start again


def test_a_runner_that_left_costs_no_write():
    seen = (Seen("garm-1", "pending_delete", NOW - timedelta(minutes=1)),)
    old = drained(retired_at=NOW - SETTINGS.drain_deadline, seen=seen)
    busy = runner("garm-2", old, runner_status="active", created_at=NOW - timedelta(days=1))
    result = run(NEW, observed=with_current(old, instances=[busy]))
    assert [w for w in writes(result) if isinstance(w, UpdateScaleset)] == []


def test_retiring_again_starts_a_fresh_drain():
    seen = (Seen("garm-1", "pending_delete", NOW),)
    noted = Notes(retired_at=RETIRED_AT, specs="abc", seen=seen)
    assert noted.retired(NOW) == Notes(retired_at=NOW, specs="abc")
    assert noted.enabled(NOW) == Notes(enabled_at=NOW, specs="abc")


def test_notes_read_what_earlier_versions_wrote_and_survive_garbage():
    assert Notes.read("retired-at=2026-11-01T12:00:00Z").retired_at == RETIRED_AT.replace(
        year=2026, month=11, day=1, hour=12, minute=0
    )
    assert Notes.read("enabled-at=2026-11-01T12:00:00Z").enabled_at is not None
    # The refusal counts earlier versions kept here are the refusals' memory's now.
    old = Notes.read(
        "retired-at=2026-11-01T12:00:00Z;kept=2;refused=1;retry-at=2026-11-01T12:01:00Z"
    )
    assert old.text() == "retired-at=2026-11-01T12:00:00Z"
    for text in ("", "garbage", "retired-at=garbage", "specs=a b", "=;;=", "seen=a@b@never"):
        notes = Notes.read(text)
        assert (notes.retired_at, notes.specs, notes.seen) == (None, "", ())


@given(
    runners=st.lists(st.sampled_from(["garm-a", "garm-b", "garm-c"]), unique=True),
    status=st.sampled_from(["pending_delete", "creating", "deleting"]),
    specs=st.sampled_from(["", "abc123"]),
    retired=st.booleans(),
)
def test_notes_round_trip(runners, status, specs, retired):
    seen = tuple(Seen(name, status, NOW) for name in sorted(runners))
    notes = Notes(retired_at=NOW if retired else None, specs=specs, seen=seen)
    assert Notes.read(notes.text()) == notes


def test_back_off_doubles_from_a_minute_and_is_capped_at_an_hour():
    assert [backoff(n) for n in (1, 2, 3)] == [FIRST_RETRY, 2 * FIRST_RETRY, 4 * FIRST_RETRY]
    assert backoff(10**9) == LONGEST_RETRY
    assert backoff(0) == timedelta(0)
