"""Operating the charm as a new operator would: its port, its actions, anywhere (#11).

Hook sequences as Juju runs them (docs/explanation/juju-lifecycle.md): the leader that
runs GARM opens its API port so that ``juju expose garm`` works, and closes it when
leadership moves on or the unit is being removed; every action fails with a message,
never a traceback, where it cannot run.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import os
import tarfile
import time
from pathlib import Path

import ops
import pytest
from charms.garm_machine.v0.garm_configurator import GarmAppData
from ops import testing

from garm.client import GarmClient
from tests.archives import long_names, tar_bytes
from tests.binaries import fake_garm
from tests.charm_states import configurator, in_full, make_state
from tests.databags import SOLE_UNIT
from tests.juju_events import leader_settings_changed, reconcile_tick
from tests.machine import goal_state

pytestmark = pytest.mark.usefixtures("machine")


def api_port(state: testing.State) -> int:
    return int(state.config["api-port"])


def test_the_leader_running_garm_opens_its_api_port(ctx, world, resources):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert state.opened_ports == frozenset({testing.TCPPort(api_port(state))})


def test_the_api_port_is_the_only_port_left_open(ctx, world, resources):
    # A port opened before (another api-port, by hand) is closed once GARM answers.
    state = make_state(world, resources, configurator(SOLE_UNIT))
    stale = dataclasses.replace(state, opened_ports=frozenset({testing.TCPPort(9997)}))
    state = ctx.run(ctx.on.config_changed(), stale)
    assert state.opened_ports == frozenset({testing.TCPPort(api_port(state))})


def test_a_deposed_leader_closes_the_port(ctx, world, resources):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert state.opened_ports
    assert state.workload_version == "v0.2.1"
    state = ctx.run(leader_settings_changed(), dataclasses.replace(state, leader=False))
    assert state.opened_ports == frozenset()
    assert state.workload_version == ""  # no GARM runs here any more
    assert state.unit_status == ops.ActiveStatus("Standing by: the leader unit runs GARM")


def test_a_unit_being_removed_closes_the_port(ctx, world, resources):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    state = ctx.run(ctx.on.stop(), state)
    assert state.opened_ports == frozenset()


def test_no_port_is_opened_before_garm_runs(ctx, world, resources):
    # Juju hands a charm an empty file for a resource nobody uploaded yet.
    Path(next(r for r in resources if r.name == "garm").path).write_bytes(b"")
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert isinstance(state.unit_status, ops.BlockedStatus)
    assert state.opened_ports == frozenset()


@pytest.mark.parametrize("action", ["reconcile", "plan", "get-credentials", "show-scalesets"])
def test_actions_on_a_non_leader_fail_saying_where_to_run_them(ctx, world, resources, action):
    state = make_state(world, resources, configurator(SOLE_UNIT), leader=False)
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action(action), state)
    assert failed.value.message == f"Run this on the leader unit: juju run garm/leader {action}"
    assert world.requests == []


@pytest.mark.parametrize("action", ["plan", "get-credentials", "show-scalesets"])
def test_actions_before_the_admin_login_exists_fail_without_a_traceback(
    ctx, world, resources, action
):
    state = dataclasses.replace(make_state(world, resources, configurator(SOLE_UNIT)), secrets=[])
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action(action), state)
    assert "admin login is not made yet" in failed.value.message


# ---------------------------------------------------------------- resources


def attached(resources: frozenset[testing.Resource], name: str) -> Path:
    return Path(next(r for r in resources if r.name == name).path)


def test_garms_version_is_the_workload_version(ctx, world, resources):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert state.workload_version == "v0.2.1"


def test_the_release_archive_is_accepted_as_it_is_downloaded(ctx, world, resources, tmp_path):
    # garm-linux-amd64.tgz holds one file, garm (GARM's scripts/make-release.sh).
    binary = fake_garm(tmp_path / "build" / "garm", "echo v0.2.0")
    with tarfile.open(attached(resources, "garm"), "w:gz") as archive:
        archive.add(binary, arcname="garm")
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert state.workload_version == "v0.2.0"


def test_a_new_revision_of_a_resource_is_checked_and_installed(ctx, world, resources, machine):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    # juju attach-resource: Juju stores a new file, then runs upgrade-charm.
    garm = attached(resources, "garm")
    fake_garm(garm, "echo v0.2.2")
    os.utime(garm, ns=(time.time_ns(), time.time_ns() + 10**9))
    state = ctx.run(ctx.on.upgrade_charm(), state)
    assert state.workload_version == "v0.2.2"
    assert b"echo v0.2.2" in machine.paths.binary.read_bytes()


@pytest.mark.parametrize(
    ("resource", "content", "why"),
    [
        ("garm", b"\x00" * 64, "not GARM"),
        ("garm", "cli", "not GARM"),
        ("garm-provider-openstack", "garm", "garm-provider-openstack"),
    ],
)
def test_a_wrong_file_blocks_naming_the_resource_and_installs_nothing(
    ctx, world, resources, machine, tmp_path, resource, content, why
):
    target = attached(resources, resource)
    if content == "cli":  # GARM's command line client, attached as the server
        fake_garm(target, main="github.com/cloudbase/garm/cmd/garm-cli")
    elif content == "garm":  # the server attached as the provider
        target.write_bytes(fake_garm(tmp_path / "garm").read_bytes())
    else:
        target.write_bytes(content)
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert isinstance(in_full(ctx, state), ops.BlockedStatus)
    assert in_full(ctx, state).message.startswith(f"Resource {resource} is not")
    assert why in in_full(ctx, state).message
    assert f"juju attach-resource garm {resource}=" in in_full(ctx, state).message
    assert not machine.paths.binary.exists()
    assert state.opened_ports == frozenset()
    assert world.requests == []


# ------------------------------------------------ what the configurators learn


def told(state: testing.State, relation_id: int = 1) -> GarmAppData:
    """What garm's application databag on the relation says, read as a configurator."""
    relation = state.get_relation(relation_id)
    assert isinstance(relation, testing.Relation)
    return GarmAppData.from_databag(relation.local_app_data)


def relabel(ctx, state: testing.State, relation: testing.Relation) -> testing.State:
    """The configurator's unit asks for other labels: a label change begins."""
    relabelled = dataclasses.replace(
        state.get_relation(relation.id),  # type: ignore[arg-type]
        remote_units_data={0: {**SOLE_UNIT, "labels": "linux,arm64"}},
    )
    state = dataclasses.replace(state, relations=[relabelled])
    return ctx.run(ctx.on.relation_changed(relabelled, remote_unit=0), state)


def test_the_leader_tells_each_unit_its_scaleset_and_phase(ctx, world, resources, later):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))
    (serving,) = world.scalesets()
    said = told(state).for_unit("garm-configurator/0")
    assert said is not None
    assert (said.phase, said.name, said.scaleset) == ("serving", "sm-x64", serving["name"])

    # A label change: while the old generation drains, the unit hears it is replaced.
    world.add_runner(serving["id"], runner_status="active")
    later()
    state = relabel(ctx, state, relation)
    said = told(state).for_unit("garm-configurator/0")
    assert said is not None
    assert (said.phase, said.replaced) == ("replacing", serving["name"])
    assert said.scaleset not in (None, serving["name"])


def test_a_held_unit_hears_why(ctx, world, resources):
    bad = {**SOLE_UNIT, "runner_http_proxy": "squid:3128"}
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(bad)))
    said = told(state).for_unit("garm-configurator/0")
    assert said is not None
    assert said.phase == "held"
    assert said.message is not None and "runner_http_proxy" in said.message


def test_a_non_leader_and_an_unreachable_garm_publish_nothing(ctx, world, resources):
    relation = configurator(SOLE_UNIT)
    follower = ctx.run(
        ctx.on.update_status(), make_state(world, resources, relation, leader=False)
    )
    assert told(follower).scalesets == {}
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))
    before = dict(state.get_relation(relation.id).local_app_data)  # type: ignore[union-attr]
    world.inject("GET", r"/scalesets/?", drop=True)
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status.name == "waiting"
    assert dict(state.get_relation(relation.id).local_app_data) == before  # type: ignore[union-attr]


def test_a_leader_being_removed_publishes_nothing_more(ctx, world, resources):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))
    before = dict(state.get_relation(relation.id).local_app_data)  # type: ignore[union-attr]
    state = ctx.run(ctx.on.stop(), state)
    # Something a live pass would publish: the unit asks for other labels.
    relabelled = dataclasses.replace(
        state.get_relation(relation.id),  # type: ignore[arg-type]
        remote_units_data={0: {**SOLE_UNIT, "labels": "linux,arm64"}},
    )
    state = ctx.run(reconcile_tick(), dataclasses.replace(state, relations=[relabelled]))
    assert dict(state.get_relation(relation.id).local_app_data) == before  # type: ignore[union-attr]


def test_a_new_leader_that_has_not_seen_the_units_join_keeps_what_was_published(
    ctx, world, resources, machine
):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))
    published = dict(state.get_relation(relation.id).local_app_data)  # type: ignore[union-attr]
    assert told(state).for_unit("garm-configurator/0") is not None
    # leader-elected on another unit before its -joined hooks: goal-state lists the unit.
    machine.systemctl.goal_state = goal_state("garm-configurator/0")
    unseen = dataclasses.replace(
        state.get_relation(relation.id),  # type: ignore[arg-type]
        remote_units_data={},
    )
    state = ctx.run(ctx.on.leader_elected(), dataclasses.replace(state, relations=[unseen]))
    assert state.unit_status.name == "waiting"
    assert dict(state.get_relation(relation.id).local_app_data) == published  # type: ignore[union-attr]


def test_show_scalesets_shows_both_generations_of_a_label_change_and_writes_nothing(
    ctx, world, resources, later
):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))
    (old,) = world.scalesets()
    world.add_runner(old["id"], runner_status="active")
    later()
    state = relabel(ctx, state, relation)
    for _ in range(3):  # the new generation made, live, the old one retired: it drains
        later()
        state = ctx.run(reconcile_tick(), state)
    (new,) = [s for s in world.scalesets() if s["id"] != old["id"]]
    writes = len(world.writes())
    ctx.run(ctx.on.action("show-scalesets"), state)
    assert len(world.writes()) == writes
    results = ctx.action_results
    assert results is not None
    draining, serving = results[f"scaleset-{old['id']}"], results[f"scaleset-{new['id']}"]
    assert (serving["current"], serving["phase"]) == ("yes", "serving")
    assert set(serving["labels"].split(",")) == {t["name"] for t in new["tags"]} >= {"arm64"}
    assert (draining["current"], draining["phase"], draining["busy"]) == ("no", "draining", "1")
    assert draining["runners"] == {"running": "1"}
    lines = results["table"].splitlines()
    assert lines[0].startswith("SCALESET") and len(lines) == 3
    assert world.username not in str(results) and world.password not in str(results)


def test_plan_says_what_the_pass_could_not_do(ctx, world, resources):
    # GARM's github_linux template lost the line the charm adds runner options before.
    client = GarmClient(world.url, world.username, world.password)
    base = next(t for t in world.templates() if t["name"] == "github_linux")
    client.update_template(base["id"], {"data": base64.b64encode(b"#!/bin/bash\n").decode()})
    mirrored = {**SOLE_UNIT, "dockerhub_mirror": "https://mirror.internal"}
    ctx.run(ctx.on.action("plan"), make_state(world, resources, configurator(mirrored)))
    assert ctx.action_results is not None
    assert "garm-cli template restore" in ctx.action_results["errors"]
    assert ctx.action_results["cut-short"] == "no"
    assert world.writes()[-1].path.startswith("/templates/")  # ours above, nothing since


def test_a_hostile_archive_blocks_naming_the_resource_instead_of_raising(
    ctx, world, resources, tmp_path
):
    # A chain of GNU long names made tarfile recurse until RecursionError, in every hook.
    binary = fake_garm(tmp_path / "build" / "garm").read_bytes()
    hostile = gzip.compress(long_names(2000) + tar_bytes(binary))
    attached(resources, "garm").write_bytes(hostile)
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert in_full(ctx, state) == ops.BlockedStatus(
        "Resource garm is not GARM: the archive holds a chain of extended headers; attach a "
        "GARM release binary or archive (juju attach-resource garm garm=<file>)"
    )
