"""One org or repo, named by configurator applications with different GitHub Apps.

GARM binds an org or repo to one credential: the relation holds every unit of such
applications naming it, and asks GARM for no binding of it, so that GARM keeps the one it
has and removes nothing.
"""

from __future__ import annotations

from garm.models import Credential, Entity
from garm.setup import AppCredential, CreateEntity, DeleteEntity, RebindEntity, plan_setup
from juju.relation import garm_inputs, own_provider, relation_state
from scalesets.spec import HeldSpec
from tests.databags import EXAMPLE_UNIT, KEY_SECRET_URI, follower
from tests.garm_double import FAKE_APP_KEY

APP_A, APP_B = ("111", "11"), ("222", "22")
A0, A1, B0 = "cfg-a/0", "cfg-a/1", "cfg-b/0"
CONFLICT = (
    "org 'example-org' is named by cfg-a and cfg-b with different GitHub Apps: "
    "give them one App, or point all but one elsewhere"
)


def leader(unit: str, app: tuple[str, str], **changes: str) -> dict[str, str]:
    """A configurator leader's databag: Phase A and B, its own provider, ``app``'s ids."""
    app_id, installation_id = app
    return {
        **EXAMPLE_UNIT,
        "name": unit.partition("/")[0],  # one scaleset name per application
        "provider_name": own_provider(unit),
        "github_app_id": app_id,
        "github_installation_id": installation_id,
        **changes,
    }


def held(*units: str, reason: str = CONFLICT) -> tuple[HeldSpec, ...]:
    return tuple(HeldSpec(u, u.partition("/")[0], reason) for u in units)


def readable(uri: str) -> str | None:
    return FAKE_APP_KEY if uri == KEY_SECRET_URI else None


def bound(units: list[tuple[str, dict[str, str]]], read=readable) -> dict[str, str]:
    """What each org or repo is asked to be bound to (kind:name to credential)."""
    wanted = garm_inputs(relation_state(True, units, app="garm").units, read)
    return {f"{e.kind}:{e.name}": e.credentials_name for e in wanted.entities}


def test_two_applications_with_different_apps_are_held_every_unit_naming_it():
    units = [
        (A0, leader(A0, APP_A)),
        (A1, follower(A1, leader(A0, APP_A))),
        (B0, leader(B0, APP_B)),
    ]
    state = relation_state(True, units, app="garm")
    assert state.desired.specs == ()
    assert state.desired.held == held(A0, A1, B0)
    assert bound(units) == {}


def test_the_applications_are_named_in_order_whichever_unit_comes_first():
    units = [(B0, leader(B0, APP_B)), (A0, leader(A0, APP_A))]
    assert relation_state(True, units, app="garm").desired.held == held(B0, A0)


def test_three_applications_are_all_held_even_when_two_agree():
    c0 = "cfg-c/0"
    units = [(A0, leader(A0, APP_A)), (B0, leader(B0, APP_A)), (c0, leader(c0, APP_B))]
    reason = (
        "org 'example-org' is named by cfg-a, cfg-b and cfg-c with different GitHub Apps: "
        "give them one App, or point all but one elsewhere"
    )
    assert relation_state(True, units, app="garm").desired.held == held(A0, B0, c0, reason=reason)


def test_units_of_one_application_never_conflict():
    # A unit that led before keeps the App it published then.
    units = [(A0, leader(A0, APP_A)), (A1, leader(A1, APP_B))]
    state = relation_state(True, units, app="garm")
    assert state.desired.held == ()
    assert [s.source for s in state.desired.specs] == [A0, A1]
    assert bound(units) == {"organization:example-org": "app-111-11"}


def test_applications_with_the_same_app_share_its_credential():
    other_key = "secret://3f9c6d2e-1b7a-4c55-8a0e-2f1d9b7c6e40/d0hq2bp5ihkc77rs9m41"
    units = [
        (A0, leader(A0, APP_A)),
        (B0, leader(B0, APP_A, github_private_key_secret_uri=other_key)),
    ]
    state = relation_state(True, units, app="garm")
    assert state.desired.held == ()
    assert [s.source for s in state.desired.specs] == [A0, B0]
    assert bound(units, lambda uri: FAKE_APP_KEY) == {"organization:example-org": "app-111-11"}


def test_ids_spelt_differently_are_one_app():
    units = [(A0, leader(A0, APP_A)), (B0, leader(B0, ("0111", "011")))]
    assert relation_state(True, units, app="garm").desired.held == ()


def test_a_repointed_application_ends_the_conflict():
    conflicted = [(A0, leader(A0, APP_A)), (B0, leader(B0, APP_B))]
    assert relation_state(True, conflicted, app="garm").desired.held == held(A0, B0)

    for repointed in (
        [(A0, leader(A0, APP_A)), (B0, leader(B0, APP_B, org="other-org"))],
        [(A0, leader(A0, APP_A)), (B0, leader(B0, APP_A))],
        [(A0, leader(A0, APP_A))],  # cfg-b removed
    ):
        state = relation_state(True, repointed, app="garm")
        assert state.desired.held == ()
        assert [s.source for s in state.desired.specs] == [u for u, _ in repointed]
    assert bound(repointed) == {"organization:example-org": "app-111-11"}
    both = [(A0, leader(A0, APP_A)), (B0, leader(B0, APP_B, org="other-org"))]
    assert bound(both) == {
        "organization:example-org": "app-111-11",
        "organization:other-org": "app-222-22",
    }


def test_org_and_repo_names_are_compared_without_case():
    units = [(A0, leader(A0, APP_A, org="Example-Org")), (B0, leader(B0, APP_B))]
    reason = CONFLICT.replace("'example-org'", "'Example-Org'")  # as the first unit spells it
    assert relation_state(True, units, app="garm").desired.held == held(A0, B0, reason=reason)

    units = [
        (A0, leader(A0, APP_A, org="", repo="Example-Org/CI")),
        (B0, leader(B0, APP_B, org="", repo="example-org/ci")),
    ]
    reason = (
        "repo 'Example-Org/CI' is named by cfg-a and cfg-b with different GitHub Apps: "
        "give them one App, or point all but one elsewhere"
    )
    assert relation_state(True, units, app="garm").desired.held == held(A0, B0, reason=reason)


def test_an_org_and_a_repo_of_its_owner_are_not_confused():
    units = [
        (A0, leader(A0, APP_A)),
        (B0, leader(B0, APP_B, org="", repo="example-org/ci")),
    ]
    assert relation_state(True, units, app="garm").desired.held == ()
    assert bound(units) == {
        "organization:example-org": "app-111-11",
        "repository:example-org/ci": "app-222-22",
    }


def test_a_conflict_is_seen_before_either_key_is_readable():
    units = [(A0, leader(A0, APP_A)), (B0, leader(B0, APP_B))]
    assert relation_state(True, units, app="garm").desired.held == held(A0, B0)
    wanted = garm_inputs(relation_state(True, units, app="garm").units, lambda uri: None)
    assert wanted.entities == ()


def test_garm_keeps_a_conflicted_org_bound_as_it_is_and_removes_nothing():
    units = [(B0, leader(B0, APP_B)), (A0, leader(A0, APP_A))]  # cfg-b's unit first
    wanted = garm_inputs(relation_state(True, units, app="garm").units, readable)
    assert ("organization", "example-org") in wanted.published
    first = AppCredential(111, 11, FAKE_APP_KEY)
    live = Entity("organization", "org-uuid", "example-org", first.name)
    credentials = [Credential(n, c.name, c.description) for n, c in enumerate(wanted.credentials)]
    assert {c.name for c in credentials} == {first.name, "app-222-22"}
    actions = plan_setup(
        wanted.credentials, wanted.entities, wanted.published, credentials, [live], []
    )
    assert actions == []
    # Not in GARM yet, it is registered under neither App.
    actions = plan_setup(wanted.credentials, wanted.entities, wanted.published, [], [], [])
    assert not [a for a in actions if isinstance(a, CreateEntity | RebindEntity | DeleteEntity)]
