"""Table tests of the pure planner, one rule at a time (issue #2, rules 1-13).

Observations are built from GARM-shaped JSON (``tests/wire.py``), absent keys included,
so every test runs on a shape GARM can send.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from garm.models import Entity, Instance, ScaleSet
from garm.refusals import LONGEST_RETRY, Refusals, digest, first_refusal
from scalesets.actions import (
    CreateScaleset,
    DeleteScaleset,
    Phase,
    Plan,
    Progress,
    RemoveInstance,
    UpdateScaleset,
    field_key,
    logical_name_of,
    shown_name,
)
from scalesets.drain import failed, working
from scalesets.naming import MAX_CANDIDATES
from scalesets.notes import Notes, specs_digest
from scalesets.planner import LISTENER_STARTUP, plan
from scalesets.spec import Desired, HeldSpec, Settings
from tests.plans import (
    NOW,
    ORG,
    PROVIDER,
    REPO,
    RETIRED_AT,
    SETTINGS,
    enabled_stamp,
    generation,
    name_of,
    observe,
    read_retirement_stamp,
    retired,
    retirement_stamp,
    run,
    runner,
    writes,
)
from tests.specs import make_spec
from tests.wire import T0, go_time, scaleset_json

# When a pass at NOW notes that what new runners get changed (docs/adr/0010).
STAMP = go_time(NOW)

# --- rule 1: generation names ----------------------------------------------------------


@pytest.mark.parametrize("budget", [6, 7, 8, 10, 16, 64])
@pytest.mark.parametrize("logical", ["ci", "lg-x64", "a/b,c", "ünïcode-name", "x" * 80, "--"])
def test_generation_name_fits_budget_and_has_no_separators(logical, budget):
    name = name_of(make_spec(name=logical), budget=budget)
    assert len(name.encode()) <= budget
    assert "/" not in name
    assert "," not in name
    assert name.isascii()


def test_generation_name_is_stable_across_releases():
    # Names are how live generations are recognised: changing the scheme would replace
    # every scaleset of every user on upgrade. This pins it.
    assert name_of(make_spec()) == "ci-24ec4a"


def test_labels_hash_case_insensitive_and_deduplicated():
    base = make_spec(labels=("linux", "x64"))
    same = make_spec(labels=("X64", "Linux", "linux", " x64 "))
    assert name_of(base) == name_of(same)


@pytest.mark.parametrize(
    "change",
    [
        {"labels": ("linux", "arm64")},
        {"provider_name": "garm-configurator-1"},
        {"entity_name": "other-org"},
        {"entity_kind": "repository", "entity_name": "example/repo"},
        {"os_type": "windows"},
    ],
)
def test_what_cannot_change_in_place_changes_the_name(change):
    assert name_of(make_spec()) != name_of(make_spec(**change))


def test_mutable_fields_do_not_change_the_name():
    changed = make_spec(image="other", flavor="m1.large", max_runners=9, runner_group="g")
    assert name_of(make_spec()) == name_of(changed)


def test_logical_names_sharing_a_prefix_get_different_names():
    assert name_of(make_spec(name="ci-small")) != name_of(make_spec(name="ci-large"))
    assert name_of(make_spec(name="ci-small"))[:3] == name_of(make_spec(name="ci-large"))[:3]


def test_name_budget_below_hash_length_is_refused():
    with pytest.raises(ValueError, match="at least 6"):
        name_of(make_spec(), budget=5)


def test_foreign_scaleset_on_first_candidate_name_gets_second_candidate():
    spec = make_spec()
    foreign = ScaleSet.from_json(scaleset_json(1, name_of(spec), labels=("other",)))
    result = run(spec, observed=observe(foreign))
    creates = [a for a in result.actions if isinstance(a, CreateScaleset)]
    assert [c.name for c in creates] == [name_of(spec, 1)]


def test_generation_on_second_candidate_stays_current_when_foreign_one_leaves():
    spec = make_spec()
    second = generation(spec, 2, name=name_of(spec, 1))
    assert writes(run(spec, observed=observe(second))) == []


def test_two_new_specs_never_choose_the_same_name():
    # With a 6-byte budget a name is the bare 24-bit hash; these two logical names were
    # found to collide on their first candidate, so the second must take another.
    a = make_spec(source="u/0", name="c624")
    b = make_spec(source="u/1", name="c864")
    assert name_of(a, budget=6) == name_of(b, budget=6)
    actions = run(a, b, observed=observe(), settings=Settings(name_budget=6)).actions
    names = [action.name for action in actions if isinstance(action, CreateScaleset)]
    assert names == [name_of(a, budget=6), name_of(b, 1, budget=6)]


# --- rule 2: families and orphans -------------------------------------------------------


def test_scaleset_of_one_logical_name_is_never_claimed_by_another():
    small = make_spec(name="ci-small", source="u/0")
    large = make_spec(name="ci-large", source="u/1")
    live_small = generation(small, 1)
    result = run(large, small, observed=observe(live_small))
    assert [type(a) for a in result.actions] == [CreateScaleset]
    assert result.actions[0].logical_name == "ci-large"  # type: ignore[union-attr]


def test_scaleset_with_a_hash_name_but_other_labels_is_not_a_member():
    spec = make_spec()
    # Same name as the spec's generation, but labels that do not hash to it.
    impostor = ScaleSet.from_json(scaleset_json(1, name_of(spec), labels=("ci", "windows")))
    result = run(spec, observed=observe(impostor))
    # Not a member: the spec's own generation is created under another candidate name.
    (create,) = result.actions
    assert isinstance(create, CreateScaleset) and create.name != name_of(spec)
    # An orphan, but it serves "ci", which the spec asks for and nothing live serves yet.
    # Its name is no generation of "ci" (nor of "windows"): GARM's name alone tells it.
    assert result.progress[-1] == Progress(None, name_of(spec), Phase.HANDING_OVER, orphan=True)


def test_scaleset_belonging_to_no_spec_is_an_orphan():
    stray = ScaleSet.from_json(scaleset_json(9, "stray", labels=("x",)))
    result = run(observed=observe(stray))
    assert result.actions == (
        UpdateScaleset(
            9,
            "stray",
            {
                "enabled": False,
                "max_runners": 0,
                "extended_state": retirement_stamp(NOW),
            },
            "retire",
        ),
    )


def test_legacy_scaleset_with_unchanged_labels_is_kept_as_it_is():
    spec = make_spec()
    legacy = generation(spec, 1, name="ci", labels=("linux", "x64"))
    assert writes(run(spec, observed=observe(legacy))) == []


def test_legacy_scaleset_is_replaced_when_its_labels_change():
    spec = make_spec(labels=("linux", "arm64"))
    legacy = generation(spec, 1, name="ci", labels=("linux", "x64"))
    result = run(spec, observed=observe(legacy))
    assert [type(a) for a in result.actions] == [CreateScaleset]
    assert result.progress[0].phase is Phase.CREATING_REPLACEMENT


# --- rules 3 and 4: create --------------------------------------------------------------


def test_create_sends_every_field_enabled_with_the_logical_name_as_label():
    spec = make_spec(
        min_idle_runners=2,
        runner_group="ci-group",
        extra_specs={"pre_install_scripts": {"pre_install.sh": "ZWNobw=="}},
    )
    (create,) = run(spec, observed=observe()).actions
    assert create == CreateScaleset(
        "ci",
        ORG,
        {
            "name": name_of(spec),
            "provider_name": PROVIDER,
            "max_runners": 5,
            "image": "image-uuid",
            "flavor": "m1.small",
            "os_type": "linux",
            "os_arch": "amd64",
            "enabled": True,
            "labels": ["ci", "linux", "x64"],
            "github-runner-group": "ci-group",
            "min_idle_runners": 2,
            "extra_specs": {"pre_install_scripts": {"pre_install.sh": "ZWNobw=="}},
        },
    )


def test_create_leaves_zero_values_out_and_targets_the_repository():
    spec = make_spec(entity_kind="repository", entity_name="Example/Repo")
    (create,) = run(spec, observed=observe()).actions
    assert isinstance(create, CreateScaleset)
    assert create.entity == REPO
    assert "min_idle_runners" not in create.body
    assert "extra_specs" not in create.body


def test_first_creation_reports_creating_then_nothing():
    spec = make_spec()
    assert run(spec, observed=observe()).progress[0].phase is Phase.CREATING
    assert run(spec, observed=observe(generation(spec, 1))).progress == ()


# --- rule 5: in-place updates and zero writes when converged ----------------------------


@pytest.mark.parametrize("min_idle", [0, 1])
def test_converged_scaleset_gets_zero_writes(min_idle):
    spec = make_spec(min_idle_runners=min_idle, extra_specs={"b": 1, "a": [1, 2]})
    live = generation(spec, 1)
    idle = runner("garm-1", live)
    assert run(spec, observed=observe(live, instances=[idle])) == Plan()


def test_labels_differing_only_in_case_are_no_change():
    spec = make_spec(labels=("linux", "x64"))
    live = generation(spec, 1, labels=("Linux", "X64", "CI"))
    assert writes(run(spec, observed=observe(live))) == []


@pytest.mark.parametrize(
    ("field", "value", "wire_key"),
    [
        ("image", "new-image", "image"),
        ("flavor", "m1.large", "flavor"),
        ("os_arch", "arm64", "os_arch"),
        ("max_runners", 9, "max_runners"),
        ("min_idle_runners", 3, "min_idle_runners"),
        ("runner_group", "other", "runner_group"),
        ("extra_specs", {"x": 1}, "extra_specs"),
    ],
)
def test_a_changed_mutable_field_is_updated_in_place_alone(field, value, wire_key):
    spec = make_spec()
    live = generation(spec, 1)
    (update,) = run(make_spec(**{field: value}), observed=observe(live)).actions
    expected = {wire_key: value}
    # What new runners get is noted as changed now, for the refresh of the idle ones
    # (docs/adr/0010); the counts are not.
    changed = (
        Notes(changed_at=NOW) if field not in ("max_runners", "min_idle_runners") else Notes()
    )
    if field == "extra_specs":
        # What the charm set is noted, for a GARM whose list leaves extra_specs out.
        changed = dataclasses.replace(changed, specs=specs_digest(value))
    if changed.text():
        expected["extended_state"] = changed.text()
    assert update == UpdateScaleset(1, live.name, expected, "update")


def test_extra_specs_removed_from_the_spec_are_cleared():
    live = generation(make_spec(extra_specs={"x": 1}), 1)
    (update,) = run(make_spec(), observed=observe(live)).actions
    assert isinstance(update, UpdateScaleset)
    assert update.changes == {"extra_specs": {}, "extended_state": Notes(changed_at=NOW).text()}


def test_current_generation_found_disabled_is_re_enabled():
    spec = make_spec()
    live = generation(spec, 1, enabled=False)
    (update,) = run(spec, observed=observe(live)).actions
    assert update == UpdateScaleset(
        1, live.name, {"enabled": True, "extended_state": enabled_stamp(NOW)}, "re-enable"
    )


# --- rule 6: hand-over ------------------------------------------------------------------


def changeover(min_idle=0, **replacement):
    """Old generation serving labels (linux, x64); spec now asks for (linux, arm64)."""
    old_spec = make_spec(min_idle_runners=min_idle)
    new_spec = make_spec(labels=("linux", "arm64"), min_idle_runners=min_idle)
    old = generation(old_spec, 1)
    new = generation(new_spec, 2, created_at=NOW - timedelta(minutes=5), **replacement)
    return new_spec, old, new


def retirement(old: ScaleSet, at=NOW) -> UpdateScaleset:
    changes = {"enabled": False, "max_runners": 0, "extended_state": retirement_stamp(at)}
    if old.min_idle_runners:
        changes["min_idle_runners"] = 0
    return UpdateScaleset(old.id, old.name, changes, "retire")


def test_label_change_creates_replacement_and_keeps_old_serving():
    new_spec, old, _ = changeover()
    result = run(new_spec, observed=observe(old))
    assert [type(a) for a in result.actions] == [CreateScaleset]
    assert result.progress[0].phase is Phase.CREATING_REPLACEMENT


def test_no_hand_over_to_a_replacement_not_registered_on_github():
    """Nor until its listener is up, counted from the pass that saw it registered: a
    scale set GitHub registers late (however old) listens seconds after that."""
    new_spec, old, new = changeover(scale_set_id=0)
    result = run(new_spec, observed=observe(old, new))
    marked = Notes(enabled_at=NOW + LONGEST_RETRY).text()
    assert writes(result) == [
        UpdateScaleset(2, new.name, {"extended_state": marked}, "note", new_spec.name)
    ]
    assert result.progress[0].phase is Phase.CREATING_REPLACEMENT
    new = dataclasses.replace(new, extended_state=marked)
    assert writes(run(new_spec, observed=observe(old, new))) == []  # marked once
    # GitHub registers it: noted now, and the old one keeps its jobs until it listens.
    later = NOW + timedelta(minutes=5)
    registered = dataclasses.replace(new, scale_set_id=106)
    result = run(new_spec, observed=observe(old, registered), now=later)
    seen = Notes(enabled_at=later).text()
    assert writes(result) == [
        UpdateScaleset(2, new.name, {"extended_state": seen}, "note", new_spec.name)
    ]
    listening = dataclasses.replace(registered, extended_state=seen)
    assert writes(run(new_spec, observed=observe(old, listening), now=later)) == []
    assert run(new_spec, observed=observe(old, listening), now=later).wake == (
        later + LISTENER_STARTUP
    )
    result = run(new_spec, observed=observe(old, listening), now=later + LISTENER_STARTUP)
    assert writes(result) == [retirement(old, at=later + LISTENER_STARTUP)]


def test_hand_over_to_registered_enabled_replacement_without_warm_capacity():
    new_spec, old, new = changeover()
    result = run(new_spec, observed=observe(old, new))
    assert writes(result) == [retirement(old)]
    assert result.progress[0].phase is Phase.RETIRING


def test_hand_over_waits_for_an_idle_runner_when_warm_capacity_is_asked():
    new_spec, old, new = changeover(min_idle=1)
    booting = runner("garm-b", new, status="creating", runner_status="pending")
    result = run(new_spec, observed=observe(old, new, instances=[booting]))
    assert writes(result) == []
    assert result.progress[0].phase is Phase.HANDING_OVER
    assert result.progress[0].describe() == "handing over"


def test_hand_over_once_the_replacement_has_an_idle_runner():
    new_spec, old, new = changeover(min_idle=1)
    idle = runner("garm-i", new)
    assert writes(run(new_spec, observed=observe(old, new, instances=[idle]))) == [retirement(old)]


def test_hand_over_after_the_timeout_even_without_idle_runner():
    new_spec, old, new = changeover(min_idle=1)
    later = new.created_at + SETTINGS.handover_timeout
    assert writes(run(new_spec, observed=observe(old, new), now=later)) == [
        retirement(old, at=later)
    ]


# --- rule 7: retirement -----------------------------------------------------------------


def test_retirement_is_one_update_zeroing_counts_with_a_stamp():
    new_spec, old, new = changeover(min_idle=1)
    idle = runner("garm-i", new)
    (update,) = run(new_spec, observed=observe(old, new, instances=[idle])).actions
    assert update == UpdateScaleset(
        1,
        old.name,
        {
            "enabled": False,
            "min_idle_runners": 0,
            "max_runners": 0,
            "extended_state": retirement_stamp(NOW),
        },
        "retire",
    )
    assert isinstance(update, UpdateScaleset)
    assert read_retirement_stamp(update.changes["extended_state"]) == NOW.replace(microsecond=0)


def test_a_retired_scaleset_found_enabled_again_gets_a_fresh_stamp():
    # Re-enabled by hand, it may have taken a job since: its drain clock starts again.
    new_spec, old, new = changeover()
    stamped_long_ago = generation(
        make_spec(), 1, extended_state=retirement_stamp(NOW - timedelta(hours=8))
    )
    (update,) = run(new_spec, observed=observe(stamped_long_ago, new)).actions
    assert update == retirement(old)


@pytest.mark.parametrize("extended_state", ["", "something else", "retired-at=garbage"])
def test_predecessor_found_disabled_without_readable_stamp_is_stamped(extended_state):
    new_spec, old, new = changeover()
    old = generation(make_spec(), 1, enabled=False, extended_state=extended_state)
    (update,) = run(new_spec, observed=observe(old, new)).actions
    assert update == UpdateScaleset(
        1, old.name, {"max_runners": 0, "extended_state": retirement_stamp(NOW)}, "retire"
    )


@pytest.mark.parametrize(
    "stamp",
    [
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),  # retired_at + deadline overflowed
        NOW + timedelta(days=3),  # would hold its drain deadline back three days
    ],
)
def test_a_retirement_stamp_no_pass_could_have_written_is_stamped_again(stamp):
    new_spec, old, new = changeover()
    busy = [runner("garm-1", old, runner_status="active")]
    (update,) = run(
        new_spec, observed=observe(retired(old, at=stamp), new, instances=busy)
    ).actions
    assert update == UpdateScaleset(
        1, old.name, {"extended_state": retirement_stamp(NOW)}, "retire"
    )


def test_a_stamp_up_to_the_longest_back_off_ahead_is_believed():
    new_spec, old, new = changeover()
    busy = [runner("garm-1", old, runner_status="active")]
    ahead = retired(old, at=NOW + timedelta(minutes=30))  # a leader's clock a little ahead
    assert writes(run(new_spec, observed=observe(ahead, new, instances=busy))) == []


# --- rule 8: delete ---------------------------------------------------------------------


def test_retired_empty_predecessor_is_deleted():
    new_spec, old, new = changeover()
    result = run(new_spec, observed=observe(retired(old), new))
    assert writes(result) == [DeleteScaleset(1, old.name)]
    assert result.progress[0].phase is Phase.AWAITING_DELETION


def test_retired_predecessor_with_runners_drains():
    new_spec, old, new = changeover()
    busy = [runner(f"garm-{i}", old, runner_status="active") for i in range(3)]
    result = run(new_spec, observed=observe(retired(old), new, instances=busy))
    assert writes(result) == []
    assert result.progress[0].describe() == "draining 3 runners"


@pytest.mark.parametrize("status", ["pending_delete", "deleting", "pending_force_delete"])
def test_any_instance_row_blocks_the_delete(status):
    new_spec, old, new = changeover()
    going = runner("garm-x", old, status=status, runner_status="terminated")
    result = run(new_spec, observed=observe(retired(old), new, instances=[going]))
    assert [w for w in writes(result) if not _notes_only(w)] == []


def _notes_only(action) -> bool:
    """A write of the charm's notes alone (a runner seen on its way out, say)."""
    return isinstance(action, UpdateScaleset) and set(action.changes) == {"extended_state"}


# --- rule 9: drain deadline -------------------------------------------------------------


def test_before_the_deadline_no_runner_is_removed():
    new_spec, old, new = changeover()
    busy = runner("garm-1", old, runner_status="active")
    just_before = RETIRED_AT + SETTINGS.drain_deadline - timedelta(seconds=1)
    result = run(new_spec, observed=observe(retired(old), new, instances=[busy]), now=just_before)
    assert writes(result) == []


def test_past_the_deadline_stuck_runners_are_force_removed():
    new_spec, old, new = changeover()
    stuck = [
        runner("garm-1", old, runner_status="active"),
        runner("garm-2", old, status="error", runner_status="failed"),
        runner("garm-3", old, status="pending_force_delete"),
        runner("garm-4", old, status="creating", runner_status="pending"),
    ]
    at_deadline = RETIRED_AT + SETTINGS.drain_deadline
    result = run(new_spec, observed=observe(retired(old), new, instances=stuck), now=at_deadline)
    assert [w for w in writes(result) if not _notes_only(w)] == [
        RemoveInstance("garm-1", 1, old.name),
        RemoveInstance("garm-2", 1, old.name),
    ]
    assert result.progress[0].describe() == "force-removing 4 stuck runners"


def test_a_zero_deadline_never_forces():
    new_spec, old, new = changeover()
    busy = runner("garm-1", old, runner_status="active")
    settings = Settings(drain_deadline=timedelta(0))
    years = RETIRED_AT + timedelta(days=3650)
    result = run(
        new_spec,
        observed=observe(retired(old), new, instances=[busy]),
        now=years,
        settings=settings,
    )
    assert writes(result) == []
    assert result.progress[0].describe() == "draining 1 runner"


# --- rule 10: flip-flop -----------------------------------------------------------------


def test_labels_changed_back_re_enable_the_predecessor_and_never_build_a_third():
    first = make_spec()
    interim_spec = make_spec(labels=("linux", "arm64"))
    old = retired(generation(first, 1))
    interim = generation(interim_spec, 2)
    busy = runner("garm-1", old, runner_status="active")
    result = run(first, observed=observe(old, interim, instances=[busy]))
    # Re-enabled with the spec's values; the interim stays until the old one is live.
    assert writes(result) == [
        UpdateScaleset(
            1,
            old.name,
            {"enabled": True, "max_runners": 5, "extended_state": enabled_stamp(NOW)},
            "re-enable",
        )
    ]
    enabled_again = generation(first, 1, extended_state=enabled_stamp(NOW))
    # Not before its listener is up again: until then the interim keeps taking the jobs.
    result = run(first, observed=observe(enabled_again, interim, instances=[busy]))
    assert writes(result) == []
    later = NOW + LISTENER_STARTUP
    result = run(first, observed=observe(enabled_again, interim, instances=[busy]), now=later)
    assert writes(result) == [retirement(interim, at=later)]


def test_flip_flop_with_warm_capacity_waits_for_an_idle_runner_again():
    # The re-enabled generation's created_at is a day old: the hand-over timeout counts
    # from its re-enabling, so the interim (the only warm capacity) keeps serving.
    first = make_spec(min_idle_runners=1)
    interim_spec = make_spec(labels=("linux", "arm64"), min_idle_runners=1)
    enabled_again = generation(first, 1, extended_state=enabled_stamp(NOW))
    interim = generation(interim_spec, 2, created_at=NOW - timedelta(hours=1))
    warm = runner("garm-b", interim)
    result = run(first, observed=observe(enabled_again, interim, instances=[warm]))
    assert writes(result) == []
    assert result.progress[0].phase is Phase.HANDING_OVER
    later = NOW + SETTINGS.handover_timeout
    result = run(first, observed=observe(enabled_again, interim, instances=[warm]), now=later)
    assert writes(result) == [retirement(interim, at=later)]


def test_a_flip_flop_re_enables_alone_first_whatever_else_changed():
    # The re-enable is a write of its own, ahead of every other field: nothing GARM may
    # refuse (a runner group, an image) can ride in it and keep the labels unserved.
    first = make_spec(image="new-image", runner_group="ghost")
    old = retired(generation(make_spec(), 1))
    interim = generation(make_spec(labels=("linux", "arm64")), 2)
    (update,) = writes(run(first, observed=observe(old, interim)))
    assert update.purpose == "re-enable"
    assert set(update.changes) == {"enabled", "max_runners", "extended_state"}
    # Once enabled, the other fields follow, each its own write if GARM refuses it.
    enabled_again = generation(make_spec(), 1, extended_state=enabled_stamp(NOW))
    (fields,) = writes(run(first, observed=observe(enabled_again, interim)))
    assert (fields.purpose, set(fields.changes) - {"extended_state"}) == (
        "update",
        {"image", "runner_group"},
    )


def test_a_held_re_enable_is_not_told_as_creating_a_replacement():
    # Nothing is created in a flip-flop: with its re-enable held back the interim
    # generation keeps serving (handing over), and the held write is what is told.
    old = retired(generation(make_spec(), 1))
    interim = generation(make_spec(labels=("linux", "arm64")), 2)
    (update,) = writes(run(make_spec(), observed=observe(old, interim)))
    ((key, asked),) = update.asks()
    refused = Refusals({key: first_refusal(asked, NOW, "database is locked", False)})
    result = run(
        make_spec(), observed=dataclasses.replace(observe(old, interim), refusals=refused)
    )
    assert writes(result) == []
    assert [p.phase for p in result.progress] == [Phase.HANDING_OVER]
    assert [h.write for h in result.held] == [f"re-enable scaleset ci ({old.name})"]


def test_a_field_garm_refused_is_held_back_alone():
    spec = make_spec(image="new-image", runner_group="ghost")
    current = generation(make_spec(), 1)
    key = field_key(current.name, "runner_group")
    refused = Refusals({key: first_refusal(digest("ghost"), NOW, "does not exist", True)})
    result = run(spec, observed=dataclasses.replace(observe(current), refusals=refused))
    (update,) = writes(result)
    assert update.changes == {"image": "new-image", "extended_state": f"changed-at={STAMP}"}
    (held,) = result.held
    assert held.write == f"update runner_group of scaleset ci ({current.name})"
    assert held.refusal.blocked
    # Asked for something else (the operator fixed it): sent at once.
    fixed = make_spec(image="new-image", runner_group="runners")
    observed = dataclasses.replace(observe(current), refusals=refused)
    (update,) = writes(run(fixed, observed=observed))
    assert update.changes == {
        "image": "new-image",
        "runner_group": "runners",
        "extended_state": f"changed-at={STAMP}",
    }


def test_extra_specs_held_back_keep_their_old_digest_in_the_notes():
    spec = make_spec(extra_specs={"a": 2}, image="new-image")
    noted = Notes(specs=specs_digest({"a": 1})).text()
    current = generation(make_spec(extra_specs={"a": 1}), 1, extended_state=noted)
    key = field_key(current.name, "extra_specs")
    refused = Refusals({key: first_refusal(digest({"a": 2}), NOW, "no", False)})
    (update,) = writes(run(spec, observed=dataclasses.replace(observe(current), refusals=refused)))
    # The notes still say {"a": 1}; the image is noted as changed.
    assert update.changes == {
        "image": "new-image",
        "extended_state": Notes(changed_at=NOW, specs=specs_digest({"a": 1})).text(),
    }


# --- rule 11: orphans -------------------------------------------------------------------


def test_orphan_is_retired_drained_and_deleted():
    orphan = generation(make_spec(name="gone"), 5, min_idle_runners=1)
    first = run(observed=observe(orphan))
    assert writes(first) == [retirement(orphan)]
    busy = runner("garm-1", orphan, runner_status="active")
    draining = run(observed=observe(retired(orphan), instances=[busy]))
    assert writes(draining) == []
    # No spec names it, but it is a generation of "gone": that is the name it goes by.
    assert draining.progress == (Progress("gone", orphan.name, Phase.DRAINING, 1, orphan=True),)
    (delete,) = writes(run(observed=observe(retired(orphan))))
    assert delete == DeleteScaleset(5, orphan.name)
    assert isinstance(delete, DeleteScaleset) and delete.logical_name == "gone"


# --- rule 12: skipped and held specs ----------------------------------------------------


@pytest.mark.parametrize(
    ("observed_kwargs", "reason"),
    [
        ({"providers": ()}, "provider 'garm-configurator-0' is not registered in GARM yet"),
        ({"entities": (REPO,)}, "organization 'example-org' is not registered in GARM yet"),
    ],
)
def test_spec_not_ready_in_garm_is_skipped_and_its_scaleset_untouched(observed_kwargs, reason):
    live = generation(make_spec(), 1)
    changed = make_spec(labels=("linux", "arm64"), max_runners=9)
    result = run(changed, observed=observe(live, **observed_kwargs))
    assert writes(result) == []
    assert [(s.source, s.name, s.reason, s.blocking) for s in result.skipped] == [
        ("garm-configurator/0", "ci", reason, False)
    ]


def test_held_spec_without_a_usable_name_holds_back_the_orphan_sweep():
    orphan = generation(make_spec(name="gone"), 5)
    held = HeldSpec("garm-configurator/3", "", "invalid name: missing")
    assert writes(run(observed=observe(orphan), held=[held])) == []


def test_held_spec_keeps_its_scalesets_untouched():
    live = generation(make_spec(), 1)
    held = HeldSpec("garm-configurator/0", "ci", "max_runner: not a number")
    result = run(observed=observe(live), held=[held])
    assert writes(result) == []
    assert (result.skipped[0].reason, result.skipped[0].blocking) == (
        "max_runner: not a number",
        True,
    )


# --- rule 13: duplicates ----------------------------------------------------------------


def test_duplicate_logical_names_first_unit_wins_and_nothing_is_retired():
    winner = make_spec(source="garm-configurator/2")
    loser = make_spec(source="other-configurator/10", labels=("windows",), name="CI")
    live = generation(winner, 1)
    result = run(loser, winner, observed=observe(live))
    assert writes(result) == []
    assert [(s.source, s.reason, s.blocking) for s in result.skipped] == [
        (
            "other-configurator/10",
            "duplicate scaleset name 'CI', already published by garm-configurator/2",
            True,
        )
    ]


def test_a_duplicate_newcomer_never_retires_the_serving_incumbent():
    incumbent = make_spec(source="garm-configurator/0", labels=("windows",))
    newcomer = make_spec(source="garm-configurator-b/0", labels=("linux", "x64"))
    live = generation(incumbent, 1)
    result = run(incumbent, newcomer, observed=observe(live))
    assert writes(result) == []  # the incumbent serves, so it keeps the name
    assert result.skipped[0].source == "garm-configurator-b/0"
    # Even with the newcomer's generation already there, neither is retired.
    theirs = generation(newcomer, 2)
    assert writes(run(incumbent, newcomer, observed=observe(live, theirs))) == []


def test_a_held_unit_is_not_replaced_by_a_duplicate_of_its_name():
    serving = make_spec(source="garm-configurator/0", labels=("linux",))
    duplicate = make_spec(source="garm-configurator/1", labels=("windows",))
    live = generation(serving, 1)
    held = HeldSpec("garm-configurator/0", "ci", "invalid max_runner: not a number")
    theirs = generation(duplicate, 2)
    for observed in (observe(live), observe(live, theirs)):
        result = run(duplicate, observed=observed, held=[held])
        assert [a for a in result.actions if getattr(a, "scaleset_id", None) == 1] == []


# --- name budget changes ----------------------------------------------------------------


def test_raising_the_budget_keeps_live_generations():
    spec = make_spec(name="longer-name")
    live = generation(spec, 1)
    assert writes(run(spec, observed=observe(live), settings=Settings(name_budget=20))) == []


def test_lowering_the_budget_replaces_generations_that_no_longer_fit():
    spec = make_spec(name="longer-name")
    live = generation(spec, 1, name=name_of(spec, budget=20))
    result = run(spec, observed=observe(live))
    (create,) = result.actions
    assert isinstance(create, CreateScaleset)
    assert create.name == name_of(spec)


@pytest.mark.parametrize("short_index", [0, 1])
def test_raising_the_budget_back_keeps_the_serving_generation_of_one_key(short_index):
    # The budget was lowered: the short-named generation took over and the long-named
    # one, its key the same (index 0), drains a job. Raised back, both names fit: the
    # one that serves stays current, whatever its candidate index or GARM id; the
    # drained one is neither re-enabled nor is anything retired or built.
    spec = make_spec()
    long = retired(generation(spec, 1, name=name_of(spec, budget=10)))
    short = generation(spec, 2, name=name_of(spec, short_index, budget=8))
    assert len(long.name) == 9 and len(short.name) == 8
    busy = runner("garm-1", long, runner_status="active")
    result = run(spec, observed=observe(long, short, instances=[busy]))
    assert writes(result) == []
    assert result.current == (("ci", short.name),)
    assert [p.phase for p in result.progress] == [Phase.DRAINING]


def test_a_serving_legacy_scaleset_is_kept_over_a_drained_generation_of_its_key():
    # A drained generation of the same key (made by hand, say) is not re-enabled over
    # the legacy scaleset that serves.
    spec = make_spec()
    legacy = generation(spec, 1, name="ci")
    drained = retired(generation(spec, 2))
    result = run(spec, observed=observe(legacy, drained))
    assert [(type(a), a.scaleset_id) for a in writes(result)] == [(DeleteScaleset, 2)]
    assert result.current == (("ci", "ci"),)


# --- rule 14: units of one configurator application are one scaleset -------------------

LEADER_PROVIDER = "garm-configurator-1"


def test_followers_of_one_application_are_neither_duplicates_nor_waiting():
    # Every unit publishes the scaleset; only the leader (unit 1) has a provider in GARM.
    units = [
        make_spec(source=f"garm-configurator/{n}", provider_name=f"garm-configurator-{n}")
        for n in range(3)
    ]
    result = run(*units, observed=observe(providers=(LEADER_PROVIDER,)))
    (create,) = writes(result)
    assert isinstance(create, CreateScaleset)
    assert create.body["provider_name"] == LEADER_PROVIDER
    assert result.skipped == ()


def test_a_configurator_leader_change_keeps_the_serving_generation():
    # The old leader (unit 1) keeps its Phase B; the new one (unit 0) publishes its own.
    old = make_spec(source="garm-configurator/1", provider_name=LEADER_PROVIDER)
    new = make_spec(source="garm-configurator/0", provider_name=PROVIDER)
    live = generation(old, 1)
    result = run(new, old, observed=observe(live, providers=(PROVIDER, LEADER_PROVIDER)))
    assert writes(result) == []
    assert result.skipped == ()


def test_the_old_configurator_leader_leaving_hands_over_to_the_new_ones_provider():
    old = make_spec(source="garm-configurator/0", provider_name=PROVIDER)
    new = make_spec(source="garm-configurator/1", provider_name=LEADER_PROVIDER)
    serving = generation(old, 1)
    providers = (PROVIDER, LEADER_PROVIDER)
    result = run(new, observed=observe(serving, providers=providers))
    (create,) = writes(result)  # the old generation serves until the new one is live
    assert isinstance(create, CreateScaleset)
    replacement = generation(new, 2)
    result = run(new, observed=observe(serving, replacement, providers=providers))
    assert [(type(a), a.scaleset_id) for a in writes(result)] == [(UpdateScaleset, 1)]


def test_an_application_whose_leader_has_no_provider_yet_waits_once():
    units = [
        make_spec(source=f"garm-configurator/{n}", provider_name=f"garm-configurator-{n}")
        for n in range(3)
    ]
    result = run(*units, observed=observe(providers=()))
    assert writes(result) == []
    assert [(s.source, s.blocking) for s in result.skipped] == [("garm-configurator/0", False)]


# --- rule 15: no label gap for any scaleset that leaves ------------------------------------


def test_a_renamed_scaleset_serves_until_its_successor_is_live():
    before = make_spec(name="ci", labels=("self-hosted", "linux", "x64"))
    after = make_spec(name="ci2", labels=("self-hosted", "linux", "x64"))
    old = generation(before, 1)
    result = run(after, observed=observe(old))
    assert [type(a) for a in writes(result)] == [CreateScaleset]  # the old one stays
    assert Progress("ci", old.name, Phase.HANDING_OVER, orphan=True) in result.progress
    # Created but not registered on GitHub yet: still not live.
    unregistered = generation(after, 2, scale_set_id=0)
    marks = writes(run(after, observed=observe(old, unregistered)))
    assert [(a.scaleset_id, a.purpose) for a in marks] == [(2, "note")]  # marked, no retire
    live = generation(after, 2)
    (retire,) = writes(run(after, observed=observe(old, live)))
    assert isinstance(retire, UpdateScaleset) and retire.scaleset_id == 1
    assert retire.purpose == "retire"


def test_a_leaving_scaleset_whose_labels_nobody_asks_for_goes_at_once():
    other = make_spec(name="big", labels=("gpu",))
    gone = generation(make_spec(name="ci", labels=("arm64",)), 1)
    result = run(other, observed=observe(gone, generation(other, 2)))
    assert [(type(a), a.scaleset_id) for a in writes(result)] == [(UpdateScaleset, 1)]


def test_a_leaving_scaleset_waits_for_another_spec_asking_its_labels():
    # "big" asks for x64 too, but its generation is not registered yet.
    big = make_spec(name="big", labels=("x64", "large"))
    gone = generation(make_spec(name="ci", labels=("linux", "x64")), 1)
    result = run(big, observed=observe(gone, generation(big, 2, scale_set_id=0)))
    assert [(a.scaleset_id, a.purpose) for a in writes(result)] == [(2, "note")]  # no retire
    result = run(big, observed=observe(gone, generation(big, 2)))
    assert [(type(a), a.scaleset_id) for a in writes(result)] == [(UpdateScaleset, 1)]


def test_labels_asked_on_another_org_do_not_hold_a_leaving_scaleset():
    elsewhere = make_spec(name="big", labels=("linux",), entity_name="other-org")
    gone = generation(make_spec(name="ci", labels=("linux",)), 1)
    result = run(elsewhere, observed=observe(gone, entities=(ORG, REPO)))
    retired_ids = [a.scaleset_id for a in writes(result) if isinstance(a, UpdateScaleset)]
    assert retired_ids == [1]


# --- rule 16: an incomplete view of Juju retires and deletes nothing -----------------------


def test_an_incomplete_view_creates_and_updates_but_never_retires_or_deletes():
    spec = make_spec(labels=("linux", "arm64"), max_runners=7)
    predecessor = generation(make_spec(labels=("linux", "x64")), 1)
    current = generation(spec, 2, max_runners=3)
    orphan = generation(make_spec(name="gone", labels=("gpu",)), 3)
    empty = retired(generation(make_spec(name="old", labels=("z",)), 4))
    stuck = retired(generation(make_spec(name="stuck", labels=("y",)), 5), at=T0)
    observed = observe(predecessor, current, orphan, empty, stuck, instances=[runner("r1", stuck)])
    unsettled = Desired((spec,), complete=False, unsettled=frozenset({"ci"}))
    incomplete = plan(unsettled, observed, NOW, SETTINGS)
    assert writes(incomplete) == [UpdateScaleset(2, current.name, {"max_runners": 7}, "update")]
    complete = plan(Desired((spec,)), observed, NOW, SETTINGS)
    kinds = {type(a) for a in writes(complete)}
    assert kinds == {UpdateScaleset, DeleteScaleset, RemoveInstance}


def test_a_partial_view_of_one_application_lets_the_others_finish_their_changeovers():
    spec = make_spec(labels=("linux", "arm64"))
    predecessor = generation(make_spec(labels=("linux", "x64")), 1)
    current = generation(spec, 2)
    orphan = generation(make_spec(name="gone", labels=("gpu",)), 3)
    observed = observe(predecessor, current, orphan)
    # Another application has a unit not seen yet: no orphan may go, "ci" may finish.
    desired = Desired((spec,), complete=False, unsettled=frozenset({"other"}))
    (retire,) = writes(plan(desired, observed, NOW, SETTINGS))
    assert isinstance(retire, UpdateScaleset) and retire.scaleset_id == 1


# --- rule 15 (continued): a job needs one runner with all its labels ------------------------


def test_labels_spread_over_several_live_scalesets_do_not_cover_a_leaving_one():
    before = make_spec(name="noble", labels=("self-hosted", "x64", "noble"))
    after = make_spec(name="noble2", labels=("self-hosted", "x64", "noble"))
    jammy = make_spec(name="jammy", labels=("self-hosted", "x64", "jammy"))
    arm = make_spec(name="arm", labels=("self-hosted", "arm64", "noble"))
    live = [generation(jammy, 2), generation(arm, 3)]
    old = generation(before, 1)
    result = run(after, jammy, arm, observed=observe(old, *live))
    assert [type(a) for a in writes(result)] == [CreateScaleset]  # old stays enabled
    result = run(after, jammy, arm, observed=observe(old, *live, generation(after, 4)))
    assert [(type(a), a.scaleset_id) for a in writes(result)] == [(UpdateScaleset, 1)]


def test_a_repository_scaleset_moving_to_its_organisation_serves_until_that_is_live():
    on_repo = make_spec(entity_kind="repository", entity_name="example-org/app")
    on_org = make_spec(name="ci-org")
    old = generation(on_repo, 1, org=None, repo=("repo-uuid", "example-org/app"))
    result = run(on_org, observed=observe(old))
    assert [type(a) for a in writes(result)] == [CreateScaleset]
    result = run(on_org, observed=observe(old, generation(on_org, 2)))
    assert [(type(a), a.scaleset_id) for a in writes(result)] == [(UpdateScaleset, 1)]


def test_an_organisation_scaleset_serves_a_repository_spec_until_that_is_live():
    on_repo = make_spec(name="app-ci", entity_kind="repository", entity_name="example-org/app")
    old = generation(make_spec(name="org-ci"), 1)  # the same labels, org-wide
    app = Entity("repository", "app-uuid", "example-org/app")
    result = run(on_repo, observed=observe(old, entities=(ORG, app)))
    assert [type(a) for a in writes(result)] == [CreateScaleset]
    live = generation(on_repo, 2, org=None, repo=("app-uuid", "example-org/app"))
    result = run(on_repo, observed=observe(old, live, entities=(ORG, app)))
    assert [(type(a), a.scaleset_id) for a in writes(result)] == [(UpdateScaleset, 1)]


def test_another_organisations_repository_does_not_hold_a_leaving_scaleset():
    elsewhere = make_spec(name="x", entity_kind="repository", entity_name="other-org/app")
    old = generation(make_spec(name="org-ci"), 1)
    result = run(elsewhere, observed=observe(old))
    assert (UpdateScaleset, 1) in [(type(a), getattr(a, "scaleset_id", 0)) for a in writes(result)]


def test_a_leaving_repository_scaleset_needs_only_its_own_jobs_served():
    # An org-wide spec asks for "linux" too but is not live; the repository's own
    # successor serving "linux" covers every job the leaving scaleset took.
    app = Entity("repository", "app-uuid", "example-org/app")
    before = make_spec(name="app", entity_kind="repository", entity_name="example-org/app")
    after = make_spec(name="app2", entity_kind="repository", entity_name="example-org/app")
    org_wide = make_spec(name="org-ci", labels=("linux",), provider_name="not-yet")
    repo = {"org": None, "repo": ("app-uuid", "example-org/app")}
    old, new = generation(before, 1, **repo), generation(after, 2, **repo)
    result = run(after, org_wide, observed=observe(old, new, entities=(ORG, app)))
    assert [(type(a), a.scaleset_id) for a in writes(result)] == [(UpdateScaleset, 1)]


# --- names: the logical scaleset first, then GARM's ---------------------------------------


def test_every_scaleset_write_names_its_logical_scaleset():
    new_spec, old, new = changeover()
    updated = make_spec(labels=("linux", "arm64"), max_runners=9)
    (update, retire) = writes(run(updated, observed=observe(old, new)))
    assert isinstance(update, UpdateScaleset) and update.purpose == "update"
    assert isinstance(retire, UpdateScaleset) and retire.purpose == "retire"
    assert (update.logical_name, retire.logical_name) == ("ci", "ci")
    past = NOW + SETTINGS.drain_deadline
    stuck = runner("garm-1", old, runner_status="active")
    (remove,) = writes(
        run(new_spec, observed=observe(retired(old), new, instances=[stuck]), now=past)
    )
    assert isinstance(remove, RemoveInstance) and remove.logical_name == "ci"
    (delete,) = writes(run(new_spec, observed=observe(retired(old), new)))
    assert isinstance(delete, DeleteScaleset) and delete.logical_name == "ci"


def test_the_logical_name_only_describes_a_write():
    # Equal writes are equal however they are described: the name is for the operator.
    assert DeleteScaleset(1, "ci-24ec4a", "ci") == DeleteScaleset(1, "ci-24ec4a")


def test_progress_names_the_scaleset_being_created():
    spec = make_spec()
    (creating,) = run(spec, observed=observe()).progress
    assert creating == Progress("ci", name_of(spec), Phase.CREATING)
    assert creating.names == f"ci ({name_of(spec)})"
    # A create that cannot be planned (every candidate name taken) is not being done: no
    # progress says "creating"; the skipped spec says why.
    taken = frozenset(name_of(spec, i) for i in range(MAX_CANDIDATES))
    waiting = run(spec, observed=dataclasses.replace(observe(), taken=taken))
    assert waiting.progress == ()
    (skipped,) = waiting.skipped
    assert skipped.name == "ci"


def test_progress_names_the_generation_being_replaced():
    new_spec, old, new = changeover(min_idle=1)
    (creating,) = run(new_spec, observed=observe(old)).progress
    assert (creating.phase, creating.scaleset) == (Phase.CREATING_REPLACEMENT, old.name)
    (handing,) = run(new_spec, observed=observe(old, new)).progress
    assert (handing.phase, handing.scaleset) == (Phase.HANDING_OVER, old.name)
    busy = runner("garm-1", old, runner_status="active")
    (draining,) = run(new_spec, observed=observe(retired(old), new, instances=[busy])).progress
    assert (draining.phase, draining.scaleset) == (Phase.DRAINING, old.name)
    assert draining.names == f"ci ({old.name})" and not draining.orphan


def test_progress_of_several_predecessors_names_the_least_advanced():
    first = generation(make_spec(labels=("linux", "x64")), 1)
    interim_spec = make_spec(labels=("linux", "riscv"))
    interim = generation(interim_spec, 3, name=name_of(interim_spec))
    new_spec = make_spec(labels=("linux", "arm64"))
    new = generation(new_spec, 5, created_at=NOW - timedelta(minutes=5))
    busy = runner("garm-1", interim, runner_status="active")
    observed = observe(retired(first), retired(interim), new, instances=[busy])
    (progress,) = run(new_spec, observed=observed).progress
    assert (progress.phase, progress.scaleset, progress.runners) == (
        Phase.DRAINING,
        interim.name,
        1,
    )


def test_orphans_sharing_a_prefix_are_told_apart_by_their_logical_names():
    small, large = make_spec(name="ci-small"), make_spec(name="ci-large", labels=("linux",))
    orphans = (generation(small, 1), generation(large, 2))
    assert orphans[0].name[:3] == orphans[1].name[:3] == "ci-"
    result = run(observed=observe(*orphans))
    assert [(p.logical_name, p.scaleset, p.orphan) for p in result.progress] == [
        ("ci-small", orphans[0].name, True),
        ("ci-large", orphans[1].name, True),
    ]
    assert [a.logical_name for a in writes(result)] == ["ci-small", "ci-large"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("labels", "name", "logical"),
    [
        (("ci", "linux", "x64"), name_of(make_spec()), "ci"),
        (("CI", "Linux", "X64"), name_of(make_spec()), "CI"),  # GARM's spelling kept
        (("ci", "linux", "x64"), "ci", None),  # legacy: its own name is all there is
        (("ci", "windows"), name_of(make_spec()), None),  # labels that do not hash to it
        ((), "stray", None),
    ],
)
def test_the_logical_name_of_a_scaleset_is_told_by_its_name_and_labels(labels, name, logical):
    scaleset = ScaleSet.from_json(scaleset_json(1, name, labels=labels))
    assert logical_name_of(scaleset) == logical


@pytest.mark.parametrize(
    ("logical", "scaleset", "shown"),
    [
        ("ci-small", "ci-4a1b2c", "ci-small (ci-4a1b2c)"),
        ("ci", "", "ci"),
        (None, "ci-9f8e7d", "ci-9f8e7d"),
        ("ci", "CI", "ci"),  # a legacy scaleset named after its logical name
    ],
)
def test_shown_name(logical, scaleset, shown):
    assert shown_name(logical, scaleset) == shown


# --- runner health: the rule the drain, the status line and the metrics share ------------


@pytest.mark.parametrize(
    ("status", "runner_status", "is_failed", "is_working"),
    [
        ("running", "idle", False, True),
        ("running", "active", False, True),
        ("running", "pending", False, False),
        ("running", "installing", False, False),
        ("creating", "", False, False),
        ("running", "failed", True, False),
        ("error", "pending", True, False),
        ("error", "idle", True, False),  # its VM errored after it came up: not serving
        ("pending_delete", "terminated", False, False),
        ("pending_delete", "idle", False, True),  # by runner_status alone, as the metrics tell
    ],
)
def test_a_runner_failed_or_works_by_its_statuses(status, runner_status, is_failed, is_working):
    runner = Instance("r", 1, status, runner_status)

    assert (failed(runner), working(runner)) == (is_failed, is_working)
