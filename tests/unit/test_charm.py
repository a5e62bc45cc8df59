"""The charm through ops.testing, with real databags and GARM as the double over HTTP.

Each test is a sequence of hooks as Juju would run them; the charm's client talks to the
GARM double on loopback (``api-port`` points at it), so what a hook writes is what GARM
holds afterwards.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import ops
import pytest
from ops import testing

from charm import ADMIN_SECRET_LABEL, GarmCharm
from tests.databags import EXAMPLE_UNIT, SECOND_UNIT
from tests.garm_double import GarmDouble


@pytest.fixture
def ctx() -> testing.Context:
    return testing.Context(GarmCharm)


@pytest.fixture
def resources(tmp_path: Path) -> frozenset[testing.Resource]:
    out = []
    for name in ("garm", "garm-provider-openstack"):
        path = tmp_path / name
        path.write_bytes(b"\x7fELF binary")
        out.append(testing.Resource(name=name, path=path))
    return frozenset(out)


@pytest.fixture
def world(garm: GarmDouble):
    garm.add_provider("garm-configurator-0")
    garm.add_provider("garm-configurator-1")
    garm.add_org("example-org")
    return garm


def configurator(*units: dict[str, str], id: int = 1) -> testing.Relation:
    return testing.Relation(
        "garm-configurator",
        remote_app_name="garm-configurator",
        id=id,
        remote_units_data=dict(enumerate(units)),
    )


def admin_secret(garm: GarmDouble) -> testing.Secret:
    return testing.Secret(
        {"username": garm.username, "password": garm.password, "email": "admin@garm.local"},
        label=ADMIN_SECRET_LABEL,
        owner="app",
    )


def make_state(garm: GarmDouble, resources, *relations, leader=True, **kw) -> testing.State:
    port = int(garm.url.rsplit(":", 1)[1])
    return testing.State(
        leader=leader,
        config={"api-port": port, **kw.pop("config", {})},
        relations=relations,
        secrets=[admin_secret(garm)],
        resources=resources,
        **kw,
    )


def publish(state: testing.State, relation_id: int, unit: int, data):
    """The state after a configurator unit published new data, and its relation."""
    old = state.get_relation(relation_id)
    assert isinstance(old, testing.Relation)
    units = {**old.remote_units_data, unit: data}
    new = dataclasses.replace(old, remote_units_data=units)
    return dataclasses.replace(state, relations=[new]), new


def live_names(garm: GarmDouble) -> list[str]:
    return sorted(s["name"] for s in garm.scalesets())


def tags(garm: GarmDouble) -> list[list[str]]:
    return sorted(sorted(t["name"] for t in s.get("tags", [])) for s in garm.scalesets())


def test_deploy_relate_creates_the_scaleset(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(ctx.on.install(), make_state(world, resources))
    assert state.unit_status == ops.BlockedStatus(
        "Integrate with garm-configurator: juju integrate garm garm-configurator"
    )
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    # Created, registered and enabled within the hook: nothing left in progress.
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    (created,) = world.scalesets()
    assert created["enabled"] is True
    assert created["max_runners"] == 10
    assert created["min_idle_runners"] == 1
    assert created["image"] == EXAMPLE_UNIT["image_id"]
    assert created["extra_specs"] == {
        "pre_install_scripts": {"pre_install.sh": "IyEvYmluL2Jhc2gKYXB0LWdldCBpbnN0YWxsIC15IGpx"}
    }
    assert tags(world) == [["large", "lg-x64", "linux", "self-hosted", "x64"]]


def test_label_change_shows_every_phase_until_converged(ctx, world, resources):
    unit = dict(SECOND_UNIT)
    relation = configurator(unit)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    (old,) = world.scalesets()
    job = world.add_runner(old["id"], runner_status="active")

    state, relation = publish(state, relation.id, 0, {**unit, "labels": "self-hosted,linux,arm64"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert state.unit_status == ops.ActiveStatus("Replacing scaleset sm-x64: draining 1 runner")
    assert len(world.scalesets()) == 2

    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == ops.ActiveStatus("Replacing scaleset sm-x64: draining 1 runner")

    world.finish_job(job)
    world.tick()
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == ops.ActiveStatus("Replacing scaleset sm-x64: awaiting deletion")
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert tags(world) == [["arm64", "linux", "self-hosted", "sm-x64"]]


def test_departed_unit_scaleset_is_retired_and_removed(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT, SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1), make_state(world, resources, relation)
    )
    assert len(world.scalesets()) == 2

    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=1), state)
    assert len(world.scalesets()) == 1
    assert state.unit_status.message.startswith("Removing scaleset")
    # Once departed, Juju no longer lists the unit.
    gone = dataclasses.replace(relation, remote_units_data={0: EXAMPLE_UNIT})
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, relations=[gone]))
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    (left,) = world.scalesets()
    assert "lg-x64" in [t["name"] for t in left["tags"]]


def test_relation_broken_sweeps_and_asks_for_the_integration(ctx, world, resources):
    relation = configurator(SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    state = ctx.run(ctx.on.relation_broken(relation), state)
    assert world.scalesets() == []
    assert state.unit_status == ops.BlockedStatus(
        "Integrate with garm-configurator: juju integrate garm garm-configurator "
        "(Removing scaleset " + world.deletions[0][1] + ": awaiting deletion)"
    )


def test_garm_down_is_waiting_and_deletes_nothing(ctx, world, resources):
    relation = configurator(SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    world.inject("GET", r"/instances/?", drop=True)
    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    assert state.unit_status.name == "waiting"
    assert state.unit_status.message.startswith("GARM unreachable, will retry")
    assert len(world.scalesets()) == 1
    assert world.writes()[-1].method == "POST"  # nothing after the create


def test_malformed_unit_is_named_and_the_other_still_reconciled(ctx, world, resources):
    bad = {**EXAMPLE_UNIT, "max_runner": "ten"}
    relation = configurator(bad, SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    assert state.unit_status == ops.BlockedStatus(
        "Fix garm-configurator/0: invalid max_runner: must be a whole number, got 'ten'"
    )
    assert tags(world) == [["linux", "self-hosted", "sm-x64", "x64"]]
    errors = [log for log in ctx.juju_log if log.level == "ERROR"]
    assert any("garm-configurator/0" in log.message for log in errors)


def test_invalid_data_leaves_the_live_scaleset_serving(ctx, world, resources):
    relation = configurator(SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    before = world.scalesets()
    state, relation = publish(state, relation.id, 0, {**SECOND_UNIT, "labels": "bad label!"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert state.unit_status == ops.BlockedStatus(
        "Fix garm-configurator/0: invalid labels: 'bad label!' is not a label "
        "(letters, digits and . _ : + -, at most 64)"
    )
    assert world.scalesets() == before


def test_unit_still_publishing_is_waiting_not_gone(ctx, world, resources):
    relation = configurator(SECOND_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    before = world.scalesets()
    phase_a = {k: v for k, v in SECOND_UNIT.items() if k != "image_id"}
    state, relation = publish(state, relation.id, 0, phase_a)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert state.unit_status == ops.WaitingStatus(
        "Waiting for garm-configurator/0: image_id not published yet"
    )
    assert world.scalesets() == before


def test_non_leader_stands_by_without_calling_garm(ctx, world, resources):
    relation = configurator(SECOND_UNIT)
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation, leader=False))
    assert state.unit_status == ops.ActiveStatus("Standing by: the leader unit runs GARM")
    assert world.requests == []


def test_empty_resource_blocks_with_the_remedy(ctx, world, resources):
    # Juju hands a charm an empty file for a resource nobody uploaded yet.
    empty = next(r for r in resources if r.name == "garm-provider-openstack")
    Path(empty.path).write_bytes(b"")
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SECOND_UNIT)))
    assert state.unit_status == ops.BlockedStatus(
        "Attach the garm-provider-openstack resource: "
        "juju attach-resource garm garm-provider-openstack=<file>"
    )
    assert world.requests == []


def test_invalid_config_blocks_naming_the_option(ctx, world, resources):
    state = make_state(
        world, resources, configurator(SECOND_UNIT), config={"scaleset-name-budget": 3}
    )
    state = ctx.run(ctx.on.config_changed(), state)
    assert state.unit_status == ops.BlockedStatus(
        "Invalid config: scaleset-name-budget must be at least 6"
    )


def test_plan_action_shows_writes_without_doing_them(ctx, world, resources):
    state = make_state(world, resources, configurator(SECOND_UNIT))
    ctx.run(ctx.on.action("plan"), state)
    assert ctx.action_results is not None
    assert ctx.action_results["writes"] == "1"
    assert ctx.action_results["actions"].startswith("create scaleset sm-")
    assert ctx.action_results["phases"] == "sm-x64: creating"
    assert world.writes() == []


def test_reconcile_action_runs_a_pass_now(ctx, world, resources):
    state = make_state(world, resources, configurator(SECOND_UNIT))
    out = ctx.run(ctx.on.action("reconcile"), state)
    assert ctx.action_results is not None
    assert ctx.action_results["done"].startswith("create scaleset sm-")
    assert ctx.action_results["status"] == "active: 1 scaleset in sync"
    assert out.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert len(world.scalesets()) == 1


def test_get_credentials_on_the_leader(ctx, world, resources):
    ctx.run(ctx.on.action("get-credentials"), make_state(world, resources))
    assert ctx.action_results == {
        "username": world.username,
        "password": world.password,
        "email": "admin@garm.local",
    }


def test_get_credentials_elsewhere_fails_clearly(ctx, world, resources):
    with pytest.raises(testing.ActionFailed, match="leader"):
        ctx.run(ctx.on.action("get-credentials"), make_state(world, resources, leader=False))


def test_admin_credentials_are_created_once_by_the_leader(ctx, world, resources):
    state = dataclasses.replace(make_state(world, resources), secrets=[])
    state = ctx.run(ctx.on.install(), state)
    (secret,) = state.secrets
    assert secret.label == ADMIN_SECRET_LABEL
    assert len(secret.tracked_content["password"]) >= 32
    again = ctx.run(ctx.on.update_status(), state)
    assert [s.tracked_content for s in again.secrets] == [secret.tracked_content]


def test_no_secret_reaches_logs_status_or_other_action_output(ctx, world, resources):
    relation = configurator(EXAMPLE_UNIT, SECOND_UNIT)
    state = make_state(world, resources, relation)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    world.expire_tokens()
    state = ctx.run(ctx.on.update_status(), state)
    world.inject("GET", r"/scalesets/?", status=500)
    state = ctx.run(ctx.on.update_status(), state)
    ctx.run(ctx.on.action("plan"), state)
    plan_output = str(ctx.action_results)
    ctx.run(ctx.on.action("reconcile"), state)
    texts = [log.message for log in ctx.juju_log]
    texts += [state.unit_status.message, plan_output, str(ctx.action_results)]
    for text in texts:
        assert world.password not in text
        assert "Bearer" not in text
