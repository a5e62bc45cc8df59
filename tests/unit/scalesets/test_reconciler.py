"""Whole passes over real HTTP against the GARM double: observe, plan, apply, fold."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from types import SimpleNamespace

import pytest

from garm import writes
from garm.models import Entity
from garm.refusals import FIRST_RETRY, LONGEST_RETRY, REFUSALS_BEFORE_BLOCKED, Refusals, backoff
from garm.setup import AppCredential, PutCredential
from garm.setup import logger as setup_logger
from garm.writes import Writes
from runners.templates import CreateTemplate, DeleteTemplate, UpdateTemplate
from scalesets.actions import CreateScaleset, DeleteScaleset, Phase, RemoveInstance, UpdateScaleset
from scalesets.naming import MAX_CANDIDATES, generation_name, spec_key
from scalesets.planner import LISTENER_STARTUP
from scalesets.reconciler import Outcome, reconcile
from scalesets.spec import Desired
from tests.changeovers import new_one_listening, retired_with_a_busy_runner
from tests.garm_double import CONSOLIDATION_INTERVAL, FAKE_APP_KEY, GarmDouble
from tests.passes import SETTINGS, rehearse
from tests.specs import make_spec


def live(garm: GarmDouble) -> dict[str, dict]:
    return {s["name"]: s for s in garm.scalesets()}


def test_first_pass_creates_and_second_pass_writes_nothing(passes, garm):
    spec = make_spec()
    outcome = passes.run(spec)
    assert outcome.ok
    assert [type(a) for a in outcome.done] == [CreateScaleset]
    (created,) = garm.scalesets()
    assert created["name"] == generation_name(spec_key(spec), 0, 10)
    assert created["enabled"] is True
    assert sorted(t["name"] for t in created["tags"]) == ["ci", "linux", "x64"]
    assert outcome.progress == ()

    again = passes.run(spec)
    assert again.done == ()
    assert passes.writes == []


def test_label_change_with_nothing_running_hands_over_once_the_new_one_listens(passes, garm):
    passes.run(make_spec())
    (old,) = garm.scalesets()
    passes.later()  # the serving generation is not brand new
    new_spec = make_spec(labels=("linux", "arm64"))
    outcome = passes.run(new_spec)
    assert [type(a) for a in outcome.done] == [CreateScaleset]
    assert [p.phase for p in outcome.progress] == [Phase.HANDING_OVER]

    passes.later(LISTENER_STARTUP)
    outcome = passes.run(new_spec)
    assert [type(a) for a in outcome.done] == [UpdateScaleset, DeleteScaleset]
    # The delete is confirmed with one read, so the pass knows it is done.
    assert [(r.method, r.path) for r in passes.last[-2:]] == [
        ("DELETE", f"/scalesets/{old['id']}"),
        ("GET", f"/scalesets/{old['id']}"),
    ]
    assert outcome.progress == ()
    assert old["name"] not in live(garm)

    settled = passes.run(new_spec)
    assert settled.progress == ()
    assert passes.writes == []


def test_label_change_waits_for_the_busy_runner_then_deletes(passes, garm):
    old, busy, new_spec = retired_with_a_busy_runner(passes, garm)
    assert [p.describe() for p in passes.outcome.progress] == ["draining 1 runner"]
    retired = live(garm)[old["name"]]
    assert "enabled" not in retired
    assert "max_runners" not in retired
    assert retired["extended_state"].startswith("retired-at=")

    assert passes.run(new_spec).done == ()  # still draining: nothing to write

    # Retired, the scaleset has no listener: GARM hears of the job's end only at its
    # next consolidation with GitHub, minutes later.
    garm.finish_job(busy)
    passes.later(CONSOLIDATION_INTERVAL)
    passes.later(timedelta(seconds=5))
    outcome = passes.run(new_spec)
    assert [type(a) for a in outcome.done] == [DeleteScaleset]
    assert passes.run(new_spec).progress == ()
    assert [s["name"] for s in garm.scalesets()] == [generation_name(spec_key(new_spec), 0, 10)]


def test_warm_capacity_is_handed_over_only_once_the_replacement_has_an_idle_runner(passes, garm):
    passes.run(make_spec(min_idle_runners=1))
    for _ in range(3):
        garm.tick()  # a runner is made, boots, reports idle
    new_spec = make_spec(labels=("linux", "arm64"), min_idle_runners=1)

    passes.run(new_spec)
    passes.later(LISTENER_STARTUP)  # listening; GARM starts the replacement's runner
    outcome = passes.run(new_spec)
    assert [p.phase for p in outcome.progress] == [Phase.HANDING_OVER]
    assert sum(s.get("enabled", False) for s in garm.scalesets()) == 2

    garm.tick()  # ... which is up but has not reported yet: not warm capacity
    assert passes.run(new_spec).progress[0].phase is Phase.HANDING_OVER
    garm.tick()  # ... and now reports idle
    outcome = passes.run(new_spec)
    assert [type(a) for a in outcome.done] == [UpdateScaleset]
    assert outcome.progress[0].describe() == "draining 1 runner"


def test_a_delete_garm_keeps_backs_off_blocks_and_clears_once_github_lets_go(passes, garm, clock):
    passes.run(make_spec())
    (old,) = garm.scalesets()
    passes.later()  # the serving generation is not brand new
    garm.delete_keeps_record = True
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)
    passes.later(LISTENER_STARTUP)
    deletes, outcome = [], Outcome()
    for kept in range(1, REFUSALS_BEFORE_BLOCKED + 1):
        outcome = passes.run(new_spec)
        deletes.append(sum(m == "DELETE" for m, _ in passes.writes))
        noted = passes.memory.refusals[f"delete:{old['name'].lower()}"]
        assert (noted.refusals, noted.retry_at) == (kept, clock.now + backoff(kept))
        # Within the back-off nothing is re-sent, however often the timer fires.
        passes.later(backoff(kept) - timedelta(seconds=1))
        assert passes.run(new_spec).done == () and passes.writes == []
        passes.later(timedelta(seconds=1))
    assert deletes == [1] * REFUSALS_BEFORE_BLOCKED
    (progress,) = outcome.progress
    assert f"GARM kept scaleset {old['name']} after {REFUSALS_BEFORE_BLOCKED} deletes" in (
        progress.blocked
    )

    garm.delete_keeps_record = False
    outcome = passes.run(new_spec)
    assert outcome.progress == ()
    assert len(garm.scalesets()) == 1
    assert passes.memory == Refusals()  # GARM took it: forgotten


def test_drain_deadline_force_removes_stuck_runners_then_deletes(passes, garm, clock):
    _, stuck, new_spec = retired_with_a_busy_runner(passes, garm)

    clock.advance(SETTINGS.drain_deadline - timedelta(seconds=1))
    assert passes.run(new_spec).done == ()
    assert garm.removals == []

    clock.advance(timedelta(seconds=1))
    garm.set_runner(stuck, runner_status="idle")  # ... and ends without GARM hearing
    outcome = passes.run(new_spec)
    assert outcome.progress[0].describe() == "force-removing 1 stuck runner"
    assert [(name, force) for name, _, _, force in garm.removals] == [(stuck, True)]
    garm.tick()
    passes.run(new_spec)
    assert [s["name"] for s in garm.scalesets()] == [generation_name(spec_key(new_spec), 0, 10)]


def test_a_force_removal_github_refuses_backs_off_then_blocks(passes, garm, clock):
    old, busy, new_spec = retired_with_a_busy_runner(passes, garm)
    clock.advance(SETTINGS.drain_deadline)
    outcome = Outcome()
    for refused in range(1, REFUSALS_BEFORE_BLOCKED + 1):
        outcome = passes.run(new_spec)
        noted = passes.memory.refusals[f"remove:{old['name'].lower()}:{busy}"]
        assert noted.refusals == refused
        assert noted.cause == "The runner cannot be removed while it is running a job."
        # GitHub's 400 says it will refuse again: the operator is told at once.
        assert "raise drain-deadline-minutes" in outcome.progress[0].blocked
        passes.later(backoff(refused) - timedelta(seconds=1))
        assert passes.run(new_spec).done == ()  # nothing re-sent within the back-off
        passes.later(timedelta(seconds=1))
    tried = [r.path for r in garm.requests if r.method == "DELETE" and "/instances/" in r.path]
    assert tried == [f"/instances/{busy}"] * REFUSALS_BEFORE_BLOCKED

    garm.finish_job(busy)  # unseen: the scaleset is retired
    outcome = passes.run(new_spec)
    # Removed at last: the refusals in a row are over, and the block with them.
    assert [type(a) for a in outcome.done] == [RemoveInstance]
    assert f"remove:{old['name'].lower()}:{busy}" not in passes.memory.refusals
    assert outcome.progress[0].blocked == ""
    passes.later(timedelta(seconds=5))
    assert passes.run(new_spec).progress == ()


def test_failed_runners_of_a_retired_scaleset_go_before_the_deadline(passes, garm):
    passes.run(make_spec())
    (old,) = garm.scalesets()
    passes.later()  # the serving generation is not brand new
    failed = garm.add_runner(old["id"], status="error", runner_status="")
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)
    passes.later(LISTENER_STARTUP)
    outcome = passes.run(new_spec)
    assert [(name, force) for name, _, _, force in garm.removals] == [(failed, True)]
    assert [type(a) for a in outcome.done] == [UpdateScaleset, RemoveInstance]
    passes.later(timedelta(seconds=5))
    assert passes.run(new_spec).progress == ()


def test_a_name_github_holds_moves_the_create_to_the_next_candidate(passes, garm):
    spec = make_spec()
    first, second = (generation_name(spec_key(spec), i, 10) for i in (0, 1))
    garm.inject(
        "POST",
        r"/organizations/.+/scalesets",
        status=400,
        error="Bad Request",
        details="error creating runner scale set: failed to create runner scale set: bad "
        "request while calling https://pipelines.actions.githubusercontent.com/_apis/runtime/"
        f'runnerscalesets?api-version=6.0-preview: "A runner scale set with name {first} '
        'already exists"',
    )
    outcome = passes.run(spec)
    assert outcome.errors == ()
    assert [s["name"] for s in garm.scalesets()] == [second]
    assert set(outcome.memory.taken) == {first}
    passes.later()
    assert passes.run(spec).done == ()  # the second name is the generation from now on


def test_names_github_holds_are_not_walked_again_on_every_pass(passes, garm, clock):
    taken = 'bad request while calling x: "A runner scale set with name n already exists"'
    garm.inject("POST", r"/organizations/.+/scalesets", status=400, details=taken, times=99)
    outcome = passes.run(make_spec())
    assert [m for m, _ in passes.writes] == ["POST"] * MAX_CANDIDATES
    (skipped,) = outcome.skipped
    assert skipped.blocking and "every candidate scaleset name is taken" in skipped.reason
    memory = outcome.memory
    for _ in range(3):  # the timer fires: nothing is sent again within the hour
        passes.later()
        outcome = passes.run(make_spec(), memory=memory)
        assert passes.writes == [] and outcome.skipped[0].blocking
    clock.advance(LONGEST_RETRY)
    passes.run(make_spec(), memory=memory)
    assert [m for m, _ in passes.writes] == ["POST"] * MAX_CANDIDATES


def test_notes_that_do_not_read_are_ignored_and_said_once_a_pass(passes, garm, caplog):
    # A hand edit (or another tool) left notes the charm cannot read: the pass goes on
    # as if they were not there, and its log names the scaleset and the notes, once.
    passes.run(make_spec())
    (scaleset,) = garm.scalesets()
    edited = "retired-at=soon;specs=not a digest;seen=garm-1@pending_delete@noon;owner=me"
    passes.client.update_scaleset(scaleset["id"], {"extended_state": edited})
    caplog.clear()
    passes.later()
    passes.run(make_spec())
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [
        f"ignored unreadable notes retired-at, specs, seen on scaleset {scaleset['name']}; "
        "written afresh when needed"
    ]
    (after,) = garm.scalesets()
    assert after["enabled"]  # nothing was read as retired


def test_a_refused_create_is_remembered_backed_off_and_retried(passes, garm, clock, caplog):
    garm.inject(
        "POST",
        r"/organizations/.+/scalesets",
        status=404,
        error="Not Found",
        details="failed to get github runner group for entity x: getting runner group ID: "
        "runner group nope not found",
        times=2,
    )
    spec = make_spec(runner_group="nope")
    outcome = passes.run(spec)
    memory = outcome.memory
    assert memory.refusals["create:ci"].refusals == 1
    (skipped,) = outcome.skipped
    assert skipped.blocking and "runner group nope not found" in skipped.reason
    caplog.clear()
    assert passes.run(spec, memory=memory).memory == memory  # nothing new
    assert passes.writes == []  # within the back-off: not re-sent
    # Logged whole when it came; not again on every timer pass while it lasts.
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    passes.later(FIRST_RETRY)
    again = passes.run(spec, memory=memory).memory
    assert again.refusals["create:ci"].refusals == 2
    # The operator fixes the runner group: created at once, the refusal forgotten.
    outcome = passes.run(make_spec(runner_group="Default"), memory=again)
    assert [type(a) for a in outcome.done] == [CreateScaleset]
    assert outcome.memory == Refusals()


def test_an_api_error_on_one_scaleset_does_not_stop_the_others(passes, garm):
    passes.run(make_spec(name="a", source="u/0"), make_spec(name="b", source="u/1"))
    a, b = sorted(garm.scalesets(), key=lambda s: s["id"])
    garm.inject("PUT", rf"/scalesets/{a['id']}", status=500, times=5)

    outcome = passes.run(
        make_spec(name="a", source="u/0", max_runners=9),
        make_spec(name="b", source="u/1", max_runners=9),
    )
    assert not outcome.ok
    assert [e.action.scaleset_id for e in outcome.errors] == [a["id"]]  # type: ignore[union-attr]
    assert live(garm)[b["name"]]["max_runners"] == 9
    assert live(garm)[a["name"]]["max_runners"] == 5


def test_an_update_garm_refuses_is_sent_again_field_by_field(passes, garm):
    garm.runner_groups = set()
    passes.run(make_spec())
    (scaleset,) = garm.scalesets()
    outcome = passes.run(make_spec(image="new-image", runner_group="ghost", max_runners=7))
    fields = [sorted(w.body) for w in garm.writes() if w.method == "PUT"]  # type: ignore[arg-type]
    # The note that what new runners get changed (docs/adr/0010) goes with the first.
    assert fields == [
        ["extended_state", "image", "max_runners", "runner_group"],
        ["extended_state", "image"],
        ["max_runners"],
        ["runner_group"],
    ]
    assert (
        live(garm)[scaleset["name"]]["image"],
        live(garm)[scaleset["name"]]["max_runners"],
    ) == (
        "new-image",
        7,
    )
    assert list(passes.memory.refusals) == [f"update:{scaleset['name'].lower()}:runner_group"]
    (held,) = outcome.held
    assert held.refusal.cause == "runner group ghost does not exist"
    # GitHub learns the group: the field goes through on its retry, and is forgotten.
    garm.runner_groups = {"ghost"}
    passes.later(FIRST_RETRY)
    passes.run(make_spec(image="new-image", runner_group="ghost", max_runners=7))
    assert passes.memory == Refusals()


def test_a_refused_retirement_waits_out_its_back_off_though_its_stamp_moves(passes, garm):
    # A retirement notes "retired now": were the stamp part of what it asks, every
    # pass's retirement would be a new request that no refusal holds back.
    new_spec = new_one_listening(passes)
    old = min(garm.scalesets(), key=lambda s: s["id"])
    garm.inject("PUT", rf"/scalesets/{old['id']}", status=500)
    passes.run(new_spec)
    assert list(passes.memory.refusals) == [f"retire:{old['name'].lower()}"]
    passes.later()  # 30 s on: within the minute's back-off
    outcome = passes.run(new_spec)
    assert ("PUT", f"/scalesets/{old['id']}") not in passes.writes
    assert [h.write for h in outcome.held] == [f"retire scaleset ci ({old['name']})"]
    passes.later(FIRST_RETRY)
    passes.run(new_spec)
    assert ("PUT", f"/scalesets/{old['id']}") in passes.writes
    assert passes.memory == Refusals()


def test_an_api_error_does_not_stop_the_orphan_sweep(passes, garm):
    passes.run(make_spec(name="a", source="u/0"), make_spec(name="b", source="u/1"))
    a = next(s for s in garm.scalesets() if "a" in [t["name"] for t in s["tags"]])
    garm.inject("PUT", rf"/scalesets/{a['id']}", status=500, times=5)
    passes.later()
    outcome = passes.run(make_spec(name="a", source="u/0", max_runners=9))
    assert len(outcome.errors) == 1
    assert [(m, p) for m, p in passes.writes if m == "DELETE"] != []


def test_the_setup_s_ledger_goes_on_into_the_scalesets_and_one_outcome_tells_both(passes, garm):
    # GARM's setup wrote one credential and had another refused: the scalesets' writes go
    # on in the same ledger, and the one outcome tells the setup's apart from theirs.
    made, refused = AppCredential(1, 2, FAKE_APP_KEY), AppCredential(9, 9, FAKE_APP_KEY)
    ledger = Writes(passes.clock.now, Refusals(), setup_logger)
    ledger.run(passes.client, [PutCredential(made)], None)
    garm.inject("POST", r"/github/credentials/?", status=500)
    ledger.run(passes.client, [PutCredential(refused)], None)
    outcome = reconcile(
        passes.client, Desired((make_spec(),)), passes.clock.now, SETTINGS, setup=ledger
    )
    assert [w.line() for w in outcome.setup] == ["create GitHub credential app-1-2"]
    assert [type(a) for a in outcome.done] == [CreateScaleset]
    assert [h.write for h in outcome.held] == ["create GitHub credential app-9-9"]
    assert outcome.ok  # the setup's refusal is told as held, not as a scaleset's error
    assert "credential:app-9-9" in outcome.memory.refusals


def test_unreachable_garm_aborts_the_pass_and_writes_nothing(passes, garm):
    garm.inject("GET", r"/instances", drop=True)
    outcome = passes.run(make_spec())
    assert outcome.unreachable is not None
    assert outcome.done == ()
    assert passes.writes == []


def test_garm_going_away_mid_pass_stops_writing_and_the_next_pass_resumes(passes, garm):
    new_spec = new_one_listening(passes)
    garm.inject("PUT", r"/scalesets/\d+", drop=True)
    outcome = passes.run(new_spec)
    assert outcome.unreachable is not None
    assert [m for m, _ in passes.writes] == ["PUT"]  # nothing after the drop
    assert sum(s.get("enabled", False) for s in garm.scalesets()) == 2  # no gap

    passes.run(new_spec)
    assert passes.run(new_spec).progress == ()
    assert len(garm.scalesets()) == 1


def test_a_create_whose_answer_is_lost_is_adopted_not_repeated(passes, garm):
    garm.inject("POST", r"/organizations/.+/scalesets", drop_after=True)
    assert passes.run(make_spec()).unreachable is not None
    assert len(garm.scalesets()) == 1
    outcome = passes.run(make_spec())
    assert outcome.done == ()
    assert len(garm.scalesets()) == 1


@pytest.mark.parametrize("count", [1, 25])
def test_observation_is_a_constant_number_of_list_calls(passes, count):
    specs = [make_spec(name=f"s{i}", source=f"u/{i:03}") for i in range(count)]
    passes.run(*specs)
    passes.run(*specs)
    assert passes.writes == []
    # scalesets, instances, providers, organizations, repositories, templates
    assert passes.reads == 6


def test_preview_plans_without_writing(garm, client, clock):
    plan = rehearse(client, Desired((make_spec(),)), clock.now, SETTINGS)
    assert [type(a) for a in plan.done] == [CreateScaleset]
    assert garm.writes() == []


def test_a_runner_reaped_before_its_force_removal_is_not_an_error(passes, garm, clock):
    _, name, new_spec = retired_with_a_busy_runner(passes, garm)
    clock.advance(SETTINGS.drain_deadline)
    garm.set_runner(name, runner_status="idle")
    garm.inject("DELETE", r"/instances/[^/]+/?", status=404, error="Not Found")
    outcome = passes.run(new_spec)
    assert outcome.ok
    assert outcome.progress[0].describe() == "force-removing 1 stuck runner"


def test_a_pass_cut_short_by_its_budget_reports_what_garm_holds_after_its_writes(
    passes, garm, monkeypatch
):
    specs = [make_spec(name=n, source=f"u/{i}") for i, n in enumerate(("a", "b"))]
    passes.run(*specs)
    passes.later()
    moved = [dataclasses.replace(s, labels=("linux", "arm64")) for s in specs]
    passes.run(*moved)
    passes.later(LISTENER_STARTUP)
    # The clock the budget is read on: the start, then one check per write.
    ticks = iter([0.0, 0.0, 5.0])
    monkeypatch.setattr(writes, "time", SimpleNamespace(monotonic=lambda: next(ticks, 5.0)))
    start = len(passes.garm.requests)
    outcome = reconcile(passes.client, Desired(tuple(moved)), passes.clock.now, SETTINGS, budget=1)
    assert outcome.cut_short
    (retire,) = outcome.done
    assert isinstance(retire, UpdateScaleset) and retire.purpose == "retire"
    assert retire.logical_name == "a"
    assert [w.method for w in garm.requests[start:] if w.method != "GET"] == ["PUT"]
    # a is retired and empty now (its delete waits for the next hook), b not yet retired.
    assert [(p.logical_name, p.phase) for p in outcome.progress] == [
        ("a", Phase.AWAITING_DELETION),
        ("b", Phase.RETIRING),
    ]


ORG = Entity("organization", "org-uuid", "example-org")


# Two logical names sharing a prefix: their GARM names both read ``ci-xxxxxx``.
@pytest.mark.parametrize(
    ("action", "line"),
    [
        (
            CreateScaleset("ci-small", ORG, {"name": "ci-4a1b2c"}),
            "create scaleset ci-small (ci-4a1b2c)",
        ),
        (
            UpdateScaleset(
                1, "ci-9f8e7d", {"max_runners": 0, "enabled": False}, "retire", "ci-large"
            ),
            "retire scaleset ci-large (ci-9f8e7d): enabled, max_runners",
        ),
        (
            UpdateScaleset(2, "ci-4a1b2c", {"image": "secret?"}, "update", "ci-small"),
            "update scaleset ci-small (ci-4a1b2c): image",
        ),
        (
            RemoveInstance("garm-x", 1, "ci-9f8e7d", "ci-large"),
            "force-remove runner garm-x of ci-large (ci-9f8e7d)",
        ),
        (DeleteScaleset(1, "ci-9f8e7d", "ci-large"), "delete scaleset ci-large (ci-9f8e7d)"),
        # An orphan whose logical name cannot be told: GARM's name alone.
        (DeleteScaleset(3, "stray"), "delete scaleset stray"),
        (
            CreateTemplate("ci-small", "garm-charm-ci-small", "d", 2, "b"),
            "create runner template garm-charm-ci-small for ci-small",
        ),
        (
            UpdateTemplate("ci", "garm-charm-ci", "d", 2, "b", template_id=7),
            "update runner template garm-charm-ci for ci",
        ),
        (DeleteTemplate(7, "garm-charm-ci"), "delete runner template garm-charm-ci"),
    ],
)
def test_an_action_names_the_logical_scaleset_then_garms(action, line):
    assert action.line() == line


# --- what a pass saw last: for the charm's metrics and runner health ---------------------


def test_the_outcome_carries_garm_as_the_pass_left_it(passes, garm):
    new_spec = new_one_listening(passes)

    outcome = passes.run(new_spec)  # retires and deletes the old generation

    assert outcome.observed is not None
    assert [s.name for s in outcome.observed.scalesets] == [s["name"] for s in garm.scalesets()]
    # Not part of what an outcome is: two passes that did the same compare equal.
    assert outcome == dataclasses.replace(outcome, observed=None)


def test_a_pass_that_could_not_read_garm_carries_no_observation(passes, garm):
    garm.inject("GET", r"/instances", drop=True)
    assert passes.run(make_spec()).observed is None
    garm.inject("GET", r"/scalesets", status=500)
    assert passes.run(make_spec()).observed is None


def test_a_pass_cut_short_by_garm_going_away_keeps_what_it_saw(passes, garm):
    new_spec = new_one_listening(passes)
    garm.inject("PUT", r"/scalesets/\d+", drop=True)

    outcome = passes.run(new_spec)

    assert outcome.unreachable is not None
    assert outcome.observed is not None and len(outcome.observed.scalesets) == 2


def test_what_garm_took_before_it_went_away_is_what_the_pass_last_saw(passes, garm):
    # Two scalesets raised in one round; GARM takes the first PUT, then is gone.
    first, second = make_spec(name="a", source="u/0"), make_spec(name="b", source="u/1")
    passes.run(first, second)
    (b_id,) = [s["id"] for s in garm.scalesets() if s["name"].startswith("b")]
    garm.inject("PUT", rf"/scalesets/{b_id}", drop=True)
    raised = [dataclasses.replace(s, max_runners=9) for s in (first, second)]

    outcome = passes.run(*raised)

    assert outcome.unreachable is not None
    assert [w.name for w in outcome.done if isinstance(w, UpdateScaleset)] == [
        n for n in (s["name"] for s in garm.scalesets()) if n.startswith("a")
    ]
    assert outcome.observed is not None
    seen = {s.name[0]: s.max_runners for s in outcome.observed.scalesets}
    assert seen == {"a": 9, "b": 5}


def test_runners_are_those_of_each_current_generation(passes, garm):
    _, busy, new_spec = retired_with_a_busy_runner(passes, garm)
    current = dict(passes.outcome.current)["ci"]
    new_id = live(garm)[current]["id"]
    made = [
        garm.add_runner(new_id, status=s, runner_status=r)
        for s, r in (("error", "pending"), ("running", "failed"), ("running", "idle"))
    ]

    (runners,) = passes.run(new_spec).runners

    assert (runners.logical_name, runners.scaleset) == ("ci", current)
    assert sorted(i.name for i in runners.instances) == sorted(made)  # not the busy one
    assert busy not in {i.name for i in runners.instances}
    assert (runners.failing, runners.working, runners.keeps_failing) == (2, 1, False)


def test_a_generation_just_made_has_no_runners_and_one_not_made_is_not_told(passes, garm):
    outcome = passes.run(make_spec())
    assert [(r.logical_name, r.instances) for r in outcome.runners] == [("ci", ())]

    garm.inject("POST", r"/organizations/.+/scalesets", status=500)
    outcome = passes.run(make_spec(), make_spec(name="other", labels=("arm64",)))
    assert [r.logical_name for r in outcome.runners] == ["ci"]
    assert Outcome().runners == ()
