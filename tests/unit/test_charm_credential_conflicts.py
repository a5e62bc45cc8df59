"""Two configurator applications with different GitHub Apps naming one org, through the
real charm.

Hooks as Juju runs them, against the GARM double over HTTP: what the charm writes is
what GARM holds. cfg-b's relation has the lower id, so its unit comes first in the
charm's order: a charm binding the org to the first unit's App would move it to cfg-b's.
"""

from __future__ import annotations

import ops
import pytest
from ops import testing

from tests.charm_states import in_full, make_state, publish
from tests.databags import EXAMPLE_UNIT
from tests.juju_events import reconcile_tick

pytestmark = pytest.mark.usefixtures("machine")

A_ID, B_ID = 2, 1
APP_A = {"github_app_id": "111", "github_installation_id": "11"}
APP_B = {"github_app_id": "222", "github_installation_id": "22"}
WHY = (
    "org 'example-org' is named by cfg-a and cfg-b with different GitHub Apps: "
    "give them one App, or point all but one elsewhere"
)


def leader_of(app: str, github: dict[str, str], **changes: str) -> dict[str, str]:
    """The configurator leader's databag (unit 0): its own scaleset and provider."""
    return {**EXAMPLE_UNIT, "name": app, "provider_name": f"{app}-0", **github, **changes}


def related(app: str, id: int, data: dict[str, str]) -> testing.Relation:
    return testing.Relation(
        "garm-configurator", remote_app_name=app, id=id, remote_units_data={0: data}
    )


def org(world, name: str) -> dict:
    return next(e for e in world.entities() if e["name"] == name)


def credential_of(world, name: str) -> str:
    names = {c["id"]: c["name"] for c in world.credentials()}
    return names[org(world, name)["credentials_id"]]


def kept(world) -> list[tuple]:
    """What the charm decides of each scaleset (its runners come and go by themselves)."""
    return sorted(
        (s["id"], s["name"], s["enabled"], s["org_name"], s["max_runners"], s["image"])
        for s in world.scalesets()
    )


def served(world) -> list[tuple[str, str]]:
    """Each enabled scaleset's logical name (its label of that name) and its org."""
    return sorted(
        (next(t["name"] for t in s["tags"] if t["name"].startswith("cfg-")), s["org_name"])
        for s in world.scalesets()
        if s["enabled"]
    )


def test_an_org_two_applications_name_with_different_apps_stays_bound_as_it_was(
    ctx, world, resources, later
):
    world.add_provider("cfg-a-0")
    world.add_provider("cfg-b-0")
    cfg_a = related("cfg-a", A_ID, leader_of("cfg-a", APP_A))
    state = ctx.run(
        ctx.on.relation_changed(cfg_a, remote_unit=0), make_state(world, resources, cfg_a)
    )
    assert in_full(ctx, state) == ops.ActiveStatus("1 scaleset in sync")
    assert credential_of(world, "example-org") == "app-111-11"
    before = kept(world)
    written = len(world.writes())

    # A second application, another GitHub App, the same org.
    cfg_b = related("cfg-b", B_ID, leader_of("cfg-b", APP_B))
    state = make_state(world, resources, cfg_a, cfg_b)
    state = ctx.run(ctx.on.relation_changed(cfg_b, remote_unit=0), state)
    blocked = ops.BlockedStatus(f"Fix cfg-b/0: {WHY}; cfg-a/0: {WHY}")
    assert in_full(ctx, state) == blocked
    for hook in (reconcile_tick, ctx.on.update_status, reconcile_tick):
        later()
        state = ctx.run(hook(), state)
        assert in_full(ctx, state) == blocked
    since = world.writes()[written:]
    # cfg-b's credential is made (its App may serve elsewhere); nothing else is written.
    assert [(w.method, w.path) for w in since] == [("POST", "/github/credentials")]
    assert credential_of(world, "example-org") == "app-111-11"
    assert kept(world) == before  # cfg-a's serves as it was; none made for cfg-b

    # cfg-b is pointed at its own org: both serve, each org under its own App.
    state, cfg_b = publish(state, B_ID, 0, leader_of("cfg-b", APP_B, org="other-org"))
    state = ctx.run(ctx.on.relation_changed(cfg_b, remote_unit=0), state)
    for _ in range(2):
        later()
        state = ctx.run(reconcile_tick(), state)
    assert in_full(ctx, state) == ops.ActiveStatus("2 scalesets in sync")
    assert served(world) == [("cfg-a", "example-org"), ("cfg-b", "other-org")]
    assert credential_of(world, "example-org") == "app-111-11"
    assert credential_of(world, "other-org") == "app-222-22"
    assert not [w for w in world.writes()[written:] if w.method == "PUT" and "org" in w.path]
