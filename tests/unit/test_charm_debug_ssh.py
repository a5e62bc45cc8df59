"""The debug-ssh relation through the real charm, hook by hook as Juju runs them (#9).

A tmate-ssh-server joins, publishes, publishes something unusable, and leaves; after
each hook GARM (the double) holds what every runner would get.
"""

from __future__ import annotations

import dataclasses

import ops
import pytest
from ops import testing

from tests.charm_states import configurator, make_state
from tests.databags import SOLE_UNIT

pytestmark = pytest.mark.usefixtures("machine")

TMATE = {
    "host": "10.5.0.7",
    "port": "10022",
    "rsa_fingerprint": "SHA256:Vg1rGvXg4v5Wq7oQ5Zt0Zm9i2kQx0zX4z9m3h2v1p0A",
    "ed25519_fingerprint": "SHA256:m0Kq3Yb6d5pG1uI8sV2e0fZxR7wT4nL9cJ6hQ3aB5cE",
}


def tmate(data: dict[str, str], *, id: int = 7) -> testing.Relation:
    return testing.Relation(
        "debug-ssh", remote_app_name="tmate-ssh-server", id=id, remote_units_data={0: data}
    )


def charm_template(world) -> dict | None:
    return next((t for t in world.templates() if t["name"].startswith("garm-charm-")), None)


def test_a_tmate_server_reaches_every_runner_and_its_departure_takes_it_away(
    ctx, world, resources, later
):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    [scaleset] = world.scalesets()
    assert charm_template(world) is None

    # Juju runs -created, -joined, then -changed once the server has published.
    debug = tmate({})
    state = dataclasses.replace(state, relations=[relation, debug])
    state = ctx.run(ctx.on.relation_created(debug), state)
    state = ctx.run(ctx.on.relation_joined(debug, remote_unit=0), state)
    assert charm_template(world) is None  # nothing published yet: nothing to give runners
    debug = dataclasses.replace(debug, remote_units_data={0: TMATE})
    state = dataclasses.replace(state, relations=[relation, debug])
    state = ctx.run(ctx.on.relation_changed(debug, remote_unit=0), state)
    template = charm_template(world)
    assert template is not None
    for line in (
        "TMATE_SERVER_HOST=10.5.0.7",
        "TMATE_SERVER_PORT=10022",
        f"TMATE_SERVER_RSA_FINGERPRINT={TMATE['rsa_fingerprint']}",
        f"TMATE_SERVER_ED25519_FINGERPRINT={TMATE['ed25519_fingerprint']}",
    ):
        assert line in template["data"]
    [same] = world.scalesets()
    assert (same["id"], same["template_id"]) == (scaleset["id"], template["id"])
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")

    # Removed: -departed (the unit has left the relation's list), then -broken.
    later()
    gone = dataclasses.replace(debug, remote_units_data={})
    state = dataclasses.replace(state, relations=[relation, gone])
    state = ctx.run(ctx.on.relation_departed(gone, remote_unit=0, departing_unit=0), state)
    state = ctx.run(ctx.on.relation_broken(gone), state)
    assert charm_template(world) is None
    [back] = world.scalesets()
    assert back["id"] == scaleset["id"]
    assert back["template_id"] == scaleset["template_id"]  # GARM's own github_linux


@pytest.mark.parametrize(
    ("key", "value"),
    [("port", "ten"), ("port", "70000"), ("host", "evil\nTMATE_SERVER_HOST=x"), ("host", "a b")],
)
def test_unusable_tmate_data_blocks_naming_the_unit_and_changes_no_template(
    ctx, world, resources, later, key, value
):
    relation = configurator(SOLE_UNIT)
    debug = tmate(TMATE)
    state = ctx.run(
        ctx.on.relation_changed(debug, remote_unit=0),
        make_state(world, resources, relation, debug),
    )
    before = world.templates()
    assert charm_template(world) is not None

    later()
    bad = dataclasses.replace(debug, remote_units_data={0: {**TMATE, key: value}})
    state = dataclasses.replace(state, relations=[relation, bad])
    state = ctx.run(ctx.on.relation_changed(bad, remote_unit=0), state)
    assert isinstance(state.unit_status, ops.BlockedStatus)
    assert "tmate-ssh-server/0" in state.unit_status.message
    assert key in state.unit_status.message
    assert world.templates() == before
    assert len(world.scalesets()) == 1


def test_a_label_change_while_tmate_data_is_unusable_keeps_the_template_it_had(
    ctx, world, resources, later
):
    relation = configurator(SOLE_UNIT)
    debug = tmate(TMATE)
    state = ctx.run(
        ctx.on.relation_changed(debug, remote_unit=0),
        make_state(world, resources, relation, debug),
    )
    template = charm_template(world)
    assert template is not None
    later()
    bad = dataclasses.replace(debug, remote_units_data={0: {**TMATE, "port": "x"}})
    relabelled = dataclasses.replace(
        relation, remote_units_data={0: {**SOLE_UNIT, "labels": "self-hosted,linux,arm64"}}
    )
    state = dataclasses.replace(state, relations=[relabelled, bad])
    ctx.run(ctx.on.relation_changed(relabelled, remote_unit=0), state)
    # The new generation is made with the template the runners had: none is lost.
    assert {s["template_id"] for s in world.scalesets()} == {template["id"]}
    assert len(world.scalesets()) == 2
    assert charm_template(world) == template
