"""The ``plan`` action's preview: the whole next pass, told without writing (#11, item 7).

Each test previews a pass over the GARM double, checks nothing was written, then runs the
real pass on the same state and compares the two write for write. The preview is the
pass itself over a GARM whose writes are imagined (``garm.recording.SimulatedGarm``), so the
writes that earlier writes unlock (a delete after a retire, a scaleset after its
template) are told too.
"""

from __future__ import annotations

import dataclasses
import logging

from charms.garm_machine.v0.garm_configurator import ConfiguratorUnitData

from garm.recording import SimulatedGarm
from juju.relation import spec_from_unit
from runners.options import RunnerContext
from runners.templates import CreateTemplate, DeleteTemplate, UpdateTemplate
from scalesets.actions import CreateScaleset, DeleteScaleset, Phase, RemoveInstance, UpdateScaleset
from scalesets.naming import generation_name, spec_key
from scalesets.planner import LISTENER_STARTUP, create_body
from scalesets.reconciler import Outcome, observe
from scalesets.spec import Desired, ScalesetSpec
from tests.changeovers import retired_with_a_busy_runner
from tests.databags import SECOND_UNIT
from tests.passes import PROVIDER, SETTINGS, Passes, rehearse
from tests.specs import make_spec

MIRROR = {"dockerhub_mirror": "https://registry-mirror.internal:5000"}


def with_options(**options: str) -> ScalesetSpec:
    """A spec whose runners need a template of their own, as the charm builds it."""
    data = {**SECOND_UNIT, "provider_name": PROVIDER, "org": "example-org", **options}
    unit = ConfiguratorUnitData.from_databag(data)
    return spec_from_unit("garm-configurator/0", unit, RunnerContext("10.1.2.9"))


def foresee(passes: Passes, *specs: ScalesetSpec, memory=None) -> Outcome:
    """Preview the next pass, checking that GARM was sent nothing."""
    written = len(passes.garm.writes())
    told = rehearse(passes.client, Desired(specs), passes.clock.now, SETTINGS, memory)
    assert len(passes.garm.writes()) == written
    return told


def lines(actions) -> list[str]:
    return [a.line() for a in actions]


def foresee_then_run(passes: Passes, *specs: ScalesetSpec) -> tuple[Outcome, Outcome]:
    """Preview the next pass, run it, and check it did what was told, write for write."""
    told = foresee(passes, *specs)
    done = passes.run(*specs)
    assert lines(told.done) == lines(done.done)
    assert told.progress == done.progress
    assert told.skipped == done.skipped
    return told, done


def test_a_preview_writes_nothing(passes, garm):
    told = foresee(passes, make_spec())
    assert [type(a) for a in told.done] == [CreateScaleset]
    assert garm.writes() == []
    assert garm.scalesets() == []


def test_a_label_change_is_told_whole_create_then_retire_and_delete(passes, garm):
    passes.run(make_spec())
    (old,) = garm.scalesets()
    passes.later()  # the serving generation is not brand new
    new_spec = make_spec(labels=("linux", "arm64"))

    told, _ = foresee_then_run(passes, new_spec)
    (create,) = told.done
    assert isinstance(create, CreateScaleset)
    # Not live before its listener can be up: the old one keeps serving meanwhile.
    assert [(p.phase, p.scaleset) for p in told.progress] == [(Phase.HANDING_OVER, old["name"])]

    passes.later(LISTENER_STARTUP)
    told, _ = foresee_then_run(passes, new_spec)
    # One preview tells the retire and the delete it unlocks, as the pass then does.
    assert lines(told.done) == [
        f"retire scaleset ci ({old['name']}): enabled, extended_state, max_runners",
        f"delete scaleset ci ({old['name']})",
    ]
    assert told.progress == ()
    assert [s["name"] for s in garm.scalesets()] == [create.name]


def test_a_first_create_is_told_as_the_status_the_pass_leaves(passes):
    # The created generation is registered and enabled: nothing is left under way.
    told, done = foresee_then_run(passes, make_spec())
    assert lines(told.done) == [f"create scaleset ci ({done.done[0].name})"]  # type: ignore[union-attr]
    assert told.progress == ()


def test_a_template_and_the_scaleset_that_needs_it_are_told_in_order(passes, garm):
    wanted = with_options(**MIRROR)
    told, _ = foresee_then_run(passes, wanted)
    template, create = told.done
    assert isinstance(template, CreateTemplate) and isinstance(create, CreateScaleset)
    # The scaleset is created with the template told just before it.
    (made,) = [t for t in garm.templates() if t["name"] == template.name]
    assert create.body["template_id"] == made["id"]
    # The base template's body was read (a read), as the pass reads it.
    assert any(r.method == "GET" and r.path.startswith("/templates/") for r in garm.requests)


def test_options_removed_tell_the_scaleset_moved_back_then_the_template_deleted(passes, garm):
    passes.run(with_options(**MIRROR))
    passes.later()
    told, _ = foresee_then_run(passes, with_options())
    update, delete = told.done
    # With the note that what new runners get changed (docs/adr/0010).
    assert isinstance(update, UpdateScaleset)
    assert set(update.changes) == {"template_id", "extended_state"}
    assert isinstance(delete, DeleteTemplate)
    assert [t for t in garm.templates() if t["name"].startswith("garm-charm-")] == []


def test_a_changed_option_is_told_as_one_template_update(passes):
    passes.run(with_options(**MIRROR))
    passes.later()
    told, _ = foresee_then_run(passes, with_options(dockerhub_mirror="https://other.internal"))
    assert [type(a) for a in told.done] == [UpdateTemplate]


def test_an_orphan_is_told_retired_and_deleted_in_one_preview(passes, garm):
    passes.run(make_spec(name="gone"))
    (gone,) = garm.scalesets()
    passes.later()
    told, _ = foresee_then_run(passes)
    # No spec names it any more; it is a generation of "gone", and is told so.
    assert lines(told.done) == [
        f"retire scaleset gone ({gone['name']}): enabled, extended_state, max_runners",
        f"delete scaleset gone ({gone['name']})",
    ]
    assert garm.scalesets() == []


def test_a_drain_is_told_as_no_write_and_its_force_removal_past_the_deadline(passes, garm, clock):
    old, busy, new_spec = retired_with_a_busy_runner(passes, garm)
    told, _ = foresee_then_run(passes, new_spec)
    assert told.done == ()
    assert [p.describe() for p in told.progress] == ["draining 1 runner"]

    clock.advance(SETTINGS.drain_deadline)
    garm.set_runner(busy, runner_status="idle")
    told, _ = foresee_then_run(passes, new_spec)
    assert lines(told.done) == [f"force-remove runner {busy} of ci ({old['name']})"]
    assert isinstance(told.done[0], RemoveInstance)
    # Removed, but its row is there until GARM reaps it: no delete yet, told or done.
    assert [p.describe() for p in told.progress] == ["force-removing 1 stuck runner"]


def test_a_delete_garm_keeps_is_told_as_a_delete(passes, garm):
    """The preview cannot know GitHub will refuse: GARM answers 200 either way.

    It tells the delete the pass sends, and the pass as if it went; the pass then finds
    the scaleset kept and remembers the refusal (no write more), and its status says so.
    """
    passes.run(make_spec())
    (old,) = garm.scalesets()
    passes.later()
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)
    passes.later(LISTENER_STARTUP)
    garm.delete_keeps_record = True

    told = foresee(passes, new_spec)
    done = passes.run(new_spec)
    assert lines(told.done)[:-1] == lines(done.done)  # the retirement
    assert isinstance(told.done[-1], DeleteScaleset)
    assert told.progress == ()
    assert f"delete:{old['name'].lower()}" in passes.memory.refusals  # kept: remembered
    assert [(p.phase, p.scaleset) for p in done.progress] == [
        (Phase.AWAITING_DELETION, old["name"])
    ]


def test_a_preview_logs_nothing_as_done(passes, caplog):
    passes.run(make_spec())
    passes.later()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="scalesets.reconciler"):
        foresee(passes, make_spec(labels=("linux", "arm64")))
    told = [r for r in caplog.records if r.name == "scalesets.reconciler"]
    assert told != [] and all(r.levelno == logging.DEBUG for r in told)
    assert all(r.getMessage().startswith("preview: ") for r in told)


def test_a_preview_keeps_to_the_pass_budget(passes):
    told = rehearse(passes.client, Desired((make_spec(),)), passes.clock.now, SETTINGS, budget=-1)
    assert told.cut_short and told.done == ()


def test_a_garm_that_cannot_be_read_fails_the_preview(passes, garm):
    garm.inject("GET", r"/instances", drop=True)
    assert foresee(passes, make_spec()).unreachable is not None
    garm.inject("GET", r"/scalesets", status=500)
    (error,) = foresee(passes, make_spec()).errors
    assert error.action is None and error.error == "Server error"


def test_a_preview_reads_as_a_pass_does_and_no_more(passes, garm):
    passes.run(make_spec())
    passes.run(make_spec())
    settled = passes.reads
    start = len(garm.requests)
    foresee(passes, make_spec())
    reads = [r for r in garm.requests[start:] if r.path != "/auth/login"]
    assert len(reads) == settled == 6
    assert all(r.method == "GET" for r in reads)


def test_a_simulated_create_is_answered_as_garm_answers_it(passes, garm):
    passes.run(make_spec(name="other", source="u/9"))
    spec = make_spec(min_idle_runners=1, runner_group="ci-group")
    simulated = SimulatedGarm(passes.client, passes.clock.now)
    observed = observe(simulated)
    body = create_body(spec, generation_name(spec_key(spec), 0, 10), spec_key(spec))
    imagined = simulated.create_scaleset(observed.entities[0], body)
    assert garm.writes()[1:] == []  # the first pass's create only
    assert imagined.id not in {s.id for s in observed.scalesets}
    real = passes.client.create_scaleset(observed.entities[0], body)
    fields = (
        "name",
        "enabled",
        "provider_name",
        "image",
        "flavor",
        "os_type",
        "os_arch",
        "max_runners",
        "min_idle_runners",
        "runner_group",
        "extra_specs",
        "entity_kind",
        "entity_id",
        "entity_name",
        "created_at",
        "template_id",
        "extended_state",
    )
    assert {f: getattr(imagined, f) for f in fields} == {f: getattr(real, f) for f in fields}
    assert sorted(imagined.labels) == sorted(real.labels)
    assert imagined.scale_set_id and real.scale_set_id  # registered on GitHub


def test_a_simulated_update_is_answered_as_garm_answers_it(passes, garm):
    passes.run(make_spec())
    (scaleset,) = garm.scalesets()
    simulated = SimulatedGarm(passes.client, passes.clock.now)
    observe(simulated)
    changes = {
        "enabled": False,
        "min_idle_runners": 0,
        "max_runners": 0,
        "extended_state": "retired-at=2026-01-01T00:00:00Z",
        "extra_specs": {"a": 1},
        "runner_group": "other",
    }
    imagined = simulated.update_scaleset(scaleset["id"], changes)
    assert garm.writes()[1:] == []
    real = passes.client.update_scaleset(scaleset["id"], changes)
    assert dataclasses.replace(imagined, labels=()) == dataclasses.replace(real, labels=())
    simulated.delete_scaleset(scaleset["id"])
    assert simulated.get_scaleset(scaleset["id"]) is None  # the confirming read: gone
    assert simulated.list_scalesets() == []
    assert len(garm.scalesets()) == 1
