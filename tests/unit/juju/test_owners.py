"""Which relation each provider comes from, and what a reused provider name leaves out."""

from __future__ import annotations

import dataclasses

from garm.config import OpenstackProvider
from garm.providers import KeptProviders, Recorded
from juju.lifecycle import WHOLE
from juju.owners import left_out, published
from juju.records import Configurators
from juju.relation import relation_state
from scalesets.actions import Skipped
from scalesets.spec import HeldSpec
from tests.databags import EXAMPLE_UNIT, SECOND_UNIT, follower

APP, OTHER = "garm-configurator", "other"
REUSED, EARLIER, OTHER_RELATION = 2, 1, 3


def provider(name: str, project: str = "ci") -> OpenstackProvider:
    return OpenstackProvider(
        name=name,
        auth_url="https://keystone.internal:5000/v3",
        username="ci",
        password="pw",
        project_name=project,
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        network="ci-net",
    )


def seen(*units: tuple[str, dict[str, str]]) -> Configurators:
    return Configurators(True, units, WHOLE, {REUSED: APP, OTHER_RELATION: OTHER})


# The application deployed again under its old name (relation 2): its leader, a follower,
# a unit whose data is refused; and another application on relation 3.
UNITS = seen(
    (f"{APP}/0", EXAMPLE_UNIT),
    (f"{APP}/1", follower(f"{APP}/1", EXAMPLE_UNIT)),
    (f"{APP}/2", {**follower(f"{APP}/2", EXAMPLE_UNIT), "max_runner": "0"}),
    (f"{OTHER}/0", {**SECOND_UNIT, "provider_name": f"{OTHER}-0"}),
)
WAITS = (
    f"provider '{APP}-0' keeps the settings of an earlier relation (id {EARLIER}) "
    "while its scalesets drain"
)


def test_each_published_provider_carries_its_units_relation():
    providers = [provider(f"{APP}-0"), provider(f"{OTHER}-0"), provider("not-seen-0")]
    assert published(providers, UNITS) == (
        Recorded(providers[0], REUSED),
        Recorded(providers[1], OTHER_RELATION),
        Recorded(providers[2], None),
    )


def test_an_application_whose_provider_is_held_is_left_out_whole_and_told_why():
    state = relation_state(True, UNITS.units, app="garm")
    assert [s.source for s in state.desired.specs] == [f"{APP}/0", f"{APP}/1", f"{OTHER}/0"]
    (refused,) = state.desired.held
    kept = KeptProviders(
        (
            Recorded(provider(f"{APP}-0", "old-project"), EARLIER),
            Recorded(provider(f"{OTHER}-0"), OTHER_RELATION),
        ),
        held=(Recorded(provider(f"{APP}-0", "new-project"), REUSED),),
    )
    after, skipped = left_out(state, kept, UNITS)
    assert [s.source for s in after.desired.specs] == [f"{OTHER}/0"]
    # Not held: a held spec would keep the earlier relation's scalesets of its name.
    assert after.desired.held == ()
    assert skipped == (
        Skipped(f"{APP}/0", "lg-x64", WAITS),
        Skipped(refused.source, refused.name, refused.reason, blocking=True),
    )
    assert dataclasses.replace(after, desired=state.desired) == state


def test_an_application_held_back_only_because_garm_cannot_tell_keeps_its_scalesets():
    """GARM not running yet: whether the reused name is still in use is not known, so the
    application is held (its live scalesets left as they are), not left out (retired)."""
    state = relation_state(True, UNITS.units, app="garm")
    (refused,) = state.desired.held
    kept = KeptProviders(
        (
            Recorded(provider(f"{APP}-0", "old-project"), EARLIER),
            Recorded(provider(f"{OTHER}-0"), OTHER_RELATION),
        ),
        held=(Recorded(provider(f"{APP}-0", "new-project"), REUSED),),
        unsure=True,
    )
    after, skipped = left_out(state, kept, UNITS)
    assert [s.source for s in after.desired.specs] == [f"{OTHER}/0"]
    assert after.desired.held == (
        refused,
        HeldSpec(f"{APP}/0", "lg-x64", f"{WAITS}, if any still uses it", blocking=False),
        HeldSpec(f"{APP}/1", "lg-x64", f"{WAITS}, if any still uses it", blocking=False),
    )
    assert skipped == ()  # the planner tells held specs itself


def test_a_spec_naming_another_relations_provider_is_left_out_alone():
    # The follower's own provider is still kept for the earlier relation's scalesets;
    # its application's leader defines the scaleset with a provider of its own.
    state = relation_state(True, UNITS.units, app="garm")
    kept = KeptProviders(
        (
            Recorded(provider(f"{APP}-0"), REUSED),
            Recorded(provider(f"{APP}-1", "old-project"), EARLIER),
        )
    )
    after, skipped = left_out(state, kept, UNITS)
    assert [s.source for s in after.desired.specs] == [f"{APP}/0", f"{OTHER}/0"]
    assert after.desired.held == state.desired.held
    assert skipped == ()


def test_a_pass_that_configured_no_provider_leaves_the_state_as_it_is():
    state = relation_state(True, UNITS.units, app="garm")
    assert left_out(state, None, UNITS) == (state, ())
