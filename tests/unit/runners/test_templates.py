"""Table tests of runner templates in the planner: made, kept current, used, deleted (#9).

Templates and scalesets are built from GARM-shaped JSON (``tests/wire.py``): the list
GARM answers has no template bodies, so everything here is decided from names,
descriptions, ids and times alone.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from garm.models import ScaleSet, Template
from runners.templates import (
    CreateTemplate,
    DeleteTemplate,
    Templates,
    UpdateTemplate,
    description,
    digest,
    template_name,
)
from scalesets.actions import CreateScaleset, Observed, Plan, UpdateScaleset
from scalesets.planner import plan
from scalesets.spec import Desired, HeldSpec, ScalesetSpec
from tests.plans import NOW, ORG, PROVIDER, REPO, SETTINGS, generation, name_of, retired
from tests.specs import make_spec
from tests.wire import T0, go_time, template_json

# The note a pass at NOW writes with a change of what new runners get (docs/adr/0010).
CHANGED_NOW = f"changed-at={go_time(NOW)}"

BLOCKS = "# the charm's blocks\nprintf '%s\\n' 'DOCKERHUB_MIRROR=https://mirror' >> .env\n"
BASE = Template.from_json(template_json(2, "github_linux", owner_id="system"))
WINDOWS = Template.from_json(template_json(1, "github_windows", owner_id="system"))


def ours(id: int, spec: ScalesetSpec, blocks: str = BLOCKS, base: Template = BASE) -> Template:
    """The template the charm keeps for ``spec``, current for ``blocks`` on ``base``."""
    text = description(spec.name, digest(base, blocks))
    return Template.from_json(template_json(id, template_name(spec.name), description=text))


def observe(*scalesets: ScaleSet, templates=(WINDOWS, BASE), instances=()) -> Observed:
    return Observed(
        tuple(scalesets),
        tuple(instances),
        frozenset({PROVIDER}),
        (ORG, REPO),
        templates=tuple(templates),
    )


def run(*specs: ScalesetSpec, observed: Observed, now=NOW, held=(), **desired) -> Plan:
    return plan(Desired(tuple(specs), tuple(held), **desired), observed, now, SETTINGS)


def of_type(result: Plan, kind: type) -> list:
    return [a for a in result.actions if isinstance(a, kind)]


SPEC = make_spec(template_blocks=BLOCKS)


def test_a_template_is_made_before_the_scaleset_that_needs_it():
    result = run(SPEC, observed=observe())
    assert result.actions == (
        CreateTemplate(
            "ci", "garm-charm-ci", description("ci", digest(BASE, BLOCKS)), BASE.id, BLOCKS
        ),
    )


def test_a_new_generation_is_created_with_its_current_template_from_birth():
    result = run(SPEC, observed=observe(templates=(BASE, ours(7, SPEC))))
    [create] = of_type(result, CreateScaleset)
    assert create.body["template_id"] == 7
    assert not of_type(result, CreateTemplate)


def test_a_spec_without_options_leaves_the_template_to_garm():
    [create] = run(make_spec(), observed=observe()).actions
    assert isinstance(create, CreateScaleset)
    assert "template_id" not in create.body


def test_options_added_to_a_serving_generation_change_it_in_place():
    live = generation(make_spec(), 1)
    result = run(SPEC, observed=observe(live, templates=(BASE, ours(7, SPEC))))
    # Noted as a change of what new runners get: idle runners are refreshed (ADR 0010).
    changes = {"template_id": 7, "extended_state": CHANGED_NOW}
    assert result.actions == (UpdateScaleset(1, live.name, changes, "update"),)


def test_a_changed_option_rewrites_the_template_and_nothing_else():
    live = generation(SPEC, 1, template_id=7)
    stale = ours(7, SPEC, blocks="# older blocks\n")
    result = run(SPEC, observed=observe(live, templates=(BASE, stale)))
    assert result.actions == (
        UpdateTemplate(
            "ci",
            "garm-charm-ci",
            description("ci", digest(BASE, BLOCKS)),
            BASE.id,
            BLOCKS,
            template_id=7,
        ),
    )


def test_a_restored_base_template_rewrites_every_template_of_the_charms():
    restored = dataclasses.replace(BASE, updated_at=T0 + timedelta(days=3))
    other = make_spec(name="big", source="garm-configurator/1", template_blocks=BLOCKS)
    live = (generation(SPEC, 1, template_id=7), generation(other, 2, template_id=8))
    templates = (restored, ours(7, SPEC), ours(8, other))
    result = run(SPEC, other, observed=observe(*live, templates=templates))
    assert {a.template_id for a in of_type(result, UpdateTemplate)} == {7, 8}
    assert not of_type(result, UpdateScaleset)


def test_a_label_change_with_options_gives_the_new_generation_the_template():
    old = generation(SPEC, 1, template_id=7)
    relabelled = dataclasses.replace(SPEC, labels=("linux", "arm64"))
    result = run(relabelled, observed=observe(old, templates=(BASE, ours(7, SPEC))))
    [create] = of_type(result, CreateScaleset)
    assert create.body["template_id"] == 7
    assert create.body["name"] == name_of(relabelled)
    assert not of_type(result, UpdateTemplate)


def test_options_removed_point_the_scaleset_back_at_garms_template_then_delete_ours():
    plain = make_spec()
    live = generation(plain, 1, template_id=7)
    result = run(plain, observed=observe(live, templates=(BASE, ours(7, SPEC))))
    assert of_type(result, UpdateScaleset) == [
        UpdateScaleset(
            1, live.name, {"template_id": BASE.id, "extended_state": CHANGED_NOW}, "update"
        )
    ]
    # GARM refuses to delete a template in use: the delete comes once nothing uses it.
    assert not of_type(result, DeleteTemplate)
    moved = dataclasses.replace(live, template_id=BASE.id)
    later = run(plain, observed=observe(moved, templates=(BASE, ours(7, SPEC))))
    assert later.actions == (DeleteTemplate(7, "garm-charm-ci"),)


def test_a_draining_generation_keeps_its_template_until_it_is_deleted():
    gone = retired(generation(SPEC, 1, template_id=7))
    other = make_spec(name="other", source="garm-configurator/1")
    result = run(other, observed=observe(gone, templates=(BASE, ours(7, SPEC))))
    assert not of_type(result, DeleteTemplate)
    after = run(other, observed=observe(templates=(BASE, ours(7, SPEC))))
    assert of_type(after, DeleteTemplate) == [DeleteTemplate(7, "garm-charm-ci")]


def test_templates_the_charm_did_not_make_are_never_written():
    foreign = (
        Template.from_json(template_json(20, "garm-charm-old", description="by hand")),
        Template.from_json(template_json(21, "custom", description=description("x", "y"))),
        Template.from_json(template_json(22, "garm-charm-x", description="", owner_id="system")),
    )
    result = run(make_spec(), observed=observe(templates=(BASE, *foreign)))
    assert not [a for a in result.actions if not isinstance(a, CreateScaleset)]


def test_a_template_the_operator_set_on_a_scaleset_is_left_there():
    live = generation(make_spec(), 1, template_id=30)
    custom = Template.from_json(template_json(30, "my-own", description="hand made"))
    assert run(make_spec(), observed=observe(live, templates=(BASE, custom))).actions == ()


def test_our_name_taken_by_someone_else_holds_the_scaleset_for_the_operator():
    taken = Template.from_json(template_json(9, "garm-charm-ci", description="mine"))
    live = generation(make_spec(), 1)
    result = run(SPEC, observed=observe(live, templates=(BASE, taken)))
    assert result.actions == ()
    [skipped] = result.skipped
    assert skipped.blocking
    assert "garm-charm-ci" in skipped.reason
    assert "did not make" in skipped.reason


def test_without_a_base_template_nothing_is_made_and_the_operator_is_told():
    result = run(SPEC, observed=observe(templates=(WINDOWS,)))
    assert result.actions == ()
    [skipped] = result.skipped
    assert skipped.blocking
    assert "garm-cli template restore" in skipped.reason


def test_without_a_base_template_one_made_before_serves_on():
    live = generation(SPEC, 1, template_id=7)
    result = run(SPEC, observed=observe(live, templates=(WINDOWS, ours(7, SPEC))))
    assert result.actions == ()
    assert result.skipped == ()


def test_held_debug_ssh_writes_no_template_and_creates_nothing_that_needs_one():
    hold = "debug-ssh unit tmate/0: port: 'x' is not a port number"
    live = generation(make_spec(), 1, template_id=7)
    stale = ours(7, SPEC, blocks="# with the old tmate server\n")
    # The existing template stays as it is and stays in use, even though no options ask.
    result = run(make_spec(), observed=observe(live, templates=(BASE, stale)), template_hold=hold)
    assert result.actions == ()
    # A scaleset that needs a template it does not have yet waits.
    waiting = run(SPEC, observed=observe(), template_hold=hold)
    assert waiting.actions == ()


def test_held_debug_ssh_moves_no_generation_to_a_template_it_does_not_have():
    # Options were dropped and the scaleset went back to GARM's template; a draining
    # predecessor still holds the charm's, old one. Unusable tmate data decides nothing.
    hold = "debug-ssh unit tmate/0: port: 'x' is not a port number"
    live = generation(make_spec(), 1, template_id=BASE.id)
    draining = retired(generation(SPEC, 2, labels=("linux",), template_id=7))
    observed = observe(live, draining, templates=(BASE, ours(7, SPEC, blocks="# old\n")))
    for spec in (make_spec(), SPEC):
        result = run(spec, observed=observed, template_hold=hold)
        assert not [
            a
            for a in result.actions
            if isinstance(a, CreateTemplate | UpdateTemplate | DeleteTemplate)
            or (isinstance(a, UpdateScaleset) and "template_id" in a.changes)
        ]


def test_a_held_or_partly_seen_family_keeps_its_template():
    unused = ours(7, SPEC)
    held = HeldSpec("garm-configurator/0", "ci", "invalid max_runner: 0")
    result = run(observed=observe(templates=(BASE, unused)), held=(held,))
    assert not of_type(result, DeleteTemplate)
    partly = run(
        make_spec(name="other", source="garm-configurator/1"),
        observed=observe(templates=(BASE, unused)),
        unsettled=frozenset({"ci"}),
    )
    assert not of_type(partly, DeleteTemplate)


def test_a_partial_view_deletes_no_template():
    leftover = ours(7, make_spec(name="gone"))
    result = run(make_spec(), observed=observe(templates=(BASE, leftover)), complete=False)
    assert not of_type(result, DeleteTemplate)
    whole = run(make_spec(), observed=observe(templates=(BASE, leftover)))
    assert of_type(whole, DeleteTemplate) == [DeleteTemplate(7, "garm-charm-gone")]


def test_a_settled_fleet_with_options_plans_nothing():
    specs = [
        make_spec(name=f"s{i}", source=f"garm-configurator/{i}", template_blocks=BLOCKS)
        for i in range(50)
    ]
    live = [generation(s, i + 1, template_id=100 + i) for i, s in enumerate(specs)]
    templates = (BASE, *(ours(100 + i, s) for i, s in enumerate(specs)))
    assert run(*specs, observed=observe(*live, templates=templates)).actions == ()


def test_template_names_follow_the_logical_name_whatever_its_case():
    assert template_name("CI-Big") == "garm-charm-ci-big"
    index = Templates([BASE, ours(7, make_spec(name="ci-big"))])
    assert index.choose("CI-Big", BLOCKS).template_id == 7
