"""GARM's providers across a leader change, and a provider name used again, through the charm.

GARM serves a scaleset only while it is configured with the scaleset's provider. The
providers a leader configured are kept in the charm's ``garm-providers`` secret, so a new
leader on a machine that never ran GARM, whose view has not every configurator unit yet,
still configures GARM with all of them (``garm.providers``). A provider name published
again by another relation waits while the earlier relation's scalesets use it
(``juju.owners``). Two garm units share the GARM double as they share PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tomllib
from pathlib import Path

import ops
import pytest
from ops import testing

from charm import GarmCharm
from garm import workload
from garm.providers import read_record
from juju.peers import PEERS
from juju.secrets import PROVIDERS_KEY, PROVIDERS_SECRET_LABEL
from tests.charm_states import (
    CONFIGURATOR_SECRETS,
    configurator,
    in_full,
    make_state,
    relate_postgresql,
)
from tests.databags import EXAMPLE_UNIT, PASSWORD_SECRET_URI
from tests.garm_double import CONSOLIDATION_INTERVAL
from tests.juju_events import leader_settings_changed, reconcile_tick
from tests.machine import APP, Machine, goal

pytestmark = pytest.mark.usefixtures("machine")

PASSWORD = "openstack-Pa55word"  # unit 0's, the configurators' secret (tests.charm_states)
OTHER_URI = "secret://3f9c6d2e-1b7a-4c55-8a0e-2f1d9b7c6e40/d0hq2cp5ihkc77rs9m50"
OTHER_PASSWORD = "0ther-openstack-Pa55word"
SECRETS = [*CONFIGURATOR_SECRETS, testing.Secret({"value": OTHER_PASSWORD}, id=OTHER_URI)]
# Runners reach GARM at an address that follows the leader, as two units need.
FOLLOWS = {"external-url": "http://garm.internal:9997"}
# Unit 1 of the configurator application: a scaleset and a provider of its own.
UNIT_1 = {
    **EXAMPLE_UNIT,
    "name": "sm-x64",
    "labels": "self-hosted,linux,x64,small",
    "provider_name": f"{APP}-1",
    "openstack_password_secret_uri": OTHER_URI,
}


def model(machine: Machine, me: str, *configurators: str, garm: tuple[str, ...] = ()) -> None:
    """goal-state: this application's units and the configurator units Juju knows."""
    related = {APP: goal("joined"), **{u: goal("active") for u in configurators}}
    machine.systemctl.goal_state = {
        "units": {u: goal("active") for u in (me, *garm)},
        "relations": {APP: related},
    }


def until_serving(ctx: testing.Context, state: testing.State) -> testing.State:
    """Timer passes until this leader runs GARM (a new leader may first wait its turn)."""
    for _ in range(3):
        if state.unit_status.name == "active" or "to join" in state.unit_status.message:
            return state
        state = ctx.run(reconcile_tick(), state)
    raise AssertionError(f"the leader never ran GARM: {state.unit_status}")


def peer(state: testing.State) -> testing.PeerRelation:
    (relation,) = [r for r in state.relations if isinstance(r, testing.PeerRelation)]
    return relation


def record_of(state: testing.State) -> testing.Secret:
    (secret,) = [s for s in state.secrets if s.label == PROVIDERS_SECRET_LABEL]
    return secret


def rendered(paths: workload.Paths) -> tuple[list[str], dict[str, str]]:
    """The providers GARM's config names, and each one's OpenStack password."""
    config = tomllib.loads(paths.config_file.read_text())
    names = [p["name"] for p in config.get("provider", [])]
    providers = paths.config_dir / "providers"
    passwords = {
        n: json.loads((providers / f"{n}-clouds.yaml").read_text())["clouds"][n]["auth"][
            "password"
        ]
        for n in names
    }
    return names, passwords


def everything_told(*states: testing.State) -> str:
    """All a reader of the model sees of these states: peer data, status, relation data."""
    told = []
    for state in states:
        told.append(f"{state.unit_status.name}: {state.unit_status.message}")
        for relation in state.relations:
            told.append(repr(relation))
    return "\n".join(told)


def test_a_new_leader_seeing_one_unit_configures_garm_with_both_providers(
    ctx, world, resources, machine: Machine, monkeypatch, tmp_path: Path, caplog
):
    caplog.set_level(logging.DEBUG)
    # garm/0 leads on PostgreSQL with two configurator units, each with its provider.
    model(machine, "garm/0", f"{APP}/0", f"{APP}/1", garm=("garm/1",))
    peers = testing.PeerRelation(PEERS, peers_data={1: {}})
    first = make_state(world, resources, peers, secrets=SECRETS, config=FOLLOWS)
    first = ctx.run(ctx.on.install(), first)
    first, database = relate_postgresql(ctx, first)
    relation = configurator(EXAMPLE_UNIT, UNIT_1, id=5)  # beside postgresql's
    first = dataclasses.replace(first, relations=[*first.relations, relation])
    first = until_serving(ctx, ctx.run(ctx.on.relation_changed(relation, remote_unit=1), first))
    assert first.unit_status == ops.ActiveStatus("2 scalesets in sync")
    assert rendered(machine.paths) == (
        [f"{APP}-0", f"{APP}-1"],
        {f"{APP}-0": PASSWORD, f"{APP}-1": OTHER_PASSWORD},
    )
    recorded = read_record(record_of(first).latest_content[PROVIDERS_KEY])
    assert recorded is not None
    assert {(r.provider.name, r.relation) for r in recorded} == {
        (f"{APP}-0", relation.id),
        (f"{APP}-1", relation.id),
    }

    # Leadership moves: garm/0 stands by and stops its GARM ...
    first = ctx.run(leader_settings_changed(), dataclasses.replace(first, leader=False))
    # ... and garm/1 leads from a machine that never ran GARM, before unit 0 of the
    # configurator joined its view (its password secret is not even granted here).
    monkeypatch.setattr(GarmCharm, "paths", workload.Paths(tmp_path / "garm-1"))
    model(machine, "garm/1", f"{APP}/0", f"{APP}/1", garm=("garm/0",))
    left = peer(first)
    peers = testing.PeerRelation(
        PEERS, local_app_data=left.local_app_data, peers_data={0: left.local_unit_data}
    )
    seen = dataclasses.replace(relation, remote_units_data={1: UNIT_1})
    granted = [s for s in first.secrets if s.id != PASSWORD_SECRET_URI]
    assert record_of(first) in granted
    other = testing.Context(GarmCharm, app_name="garm", unit_id=1)
    second = make_state(world, resources, seen, database, peers, secrets=granted, config=FOLLOWS)
    second = until_serving(other, other.run(other.on.leader_elected(), second))
    assert second.unit_status == ops.WaitingStatus(
        f"Waiting for {APP}/0 to join: nothing it may serve is retired until then"
    )
    # GARM is configured with both providers, unit 0's password from the record.
    assert rendered(GarmCharm.paths) == (
        [f"{APP}-1", f"{APP}-0"],
        {f"{APP}-0": PASSWORD, f"{APP}-1": OTHER_PASSWORD},
    )
    assert len(world.scalesets()) == 2 and all(s["enabled"] for s in world.scalesets())
    # Nothing changed: no new revision of the record.
    assert record_of(second).latest_content == record_of(first).latest_content
    logged = "\n".join(line.message for line in (*ctx.juju_log, *other.juju_log))
    for password in (PASSWORD, OTHER_PASSWORD):
        assert password not in everything_told(first, second)
        assert password not in caplog.text and password not in logged


def test_a_settled_pass_writes_no_new_revision_of_the_record(
    ctx, world, resources, machine: Machine, monkeypatch
):
    model(machine, "garm/0", f"{APP}/0")
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    assert read_record(record_of(state).latest_content[PROVIDERS_KEY]) is not None
    written: list[dict[str, str]] = []
    set_content = ops.Secret.set_content
    monkeypatch.setattr(
        ops.Secret,
        "set_content",
        lambda self, content: written.append(content) or set_content(self, content),
    )
    for _ in range(2):
        state = ctx.run(ctx.on.update_status(), state)
    assert written == []
    # A rotated password is a change: one new revision, with it.
    rotated = [
        testing.Secret({"value": "r0tated-Pa55word"}, id=PASSWORD_SECRET_URI),
        *(s for s in state.secrets if s.id != PASSWORD_SECRET_URI),
    ]
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, secrets=rotated))
    (content,) = written
    assert [r.provider.password for r in read_record(content[PROVIDERS_KEY]) or ()] == [
        "r0tated-Pa55word"
    ]


def test_after_an_upgrade_the_files_stand_in_for_the_record_until_there_is_one(
    ctx, world, resources, machine: Machine
):
    model(machine, "garm/0", f"{APP}/0")
    relation = configurator(EXAMPLE_UNIT)
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    # A revision without the record ran GARM here; its unit's password is not readable
    # now (the secret's grant is being renewed), while its scaleset serves.
    earlier = [s for s in state.secrets if s.label != PROVIDERS_SECRET_LABEL]
    unreadable = [s for s in earlier if s.id != PASSWORD_SECRET_URI]
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, secrets=unreadable))
    assert rendered(machine.paths) == ([f"{APP}-0"], {f"{APP}-0": PASSWORD})
    kept = read_record(record_of(state).latest_content[PROVIDERS_KEY]) or ()
    assert [(r.provider.password, r.relation) for r in kept] == [(PASSWORD, None)]
    # Readable again: the unit's relation takes its provider over.
    state = dataclasses.replace(state, secrets=[*state.secrets, *CONFIGURATOR_SECRETS[:1]])
    state = ctx.run(ctx.on.update_status(), state)
    kept = read_record(record_of(state).latest_content[PROVIDERS_KEY]) or ()
    assert [(r.provider.password, r.relation) for r in kept] == [(PASSWORD, relation.id)]


def test_a_record_juju_refuses_is_logged_and_the_hook_goes_on(
    ctx, world, resources, machine: Machine, monkeypatch, caplog
):
    def refused(self, content, **_):
        raise ops.ModelError("ERROR secret content too large")

    monkeypatch.setattr(ops.Application, "add_secret", refused)
    model(machine, "garm/0", f"{APP}/0")
    state = ctx.run(
        ctx.on.update_status(), make_state(world, resources, configurator(EXAMPLE_UNIT))
    )
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert "record of GARM's providers could not be written" in caplog.text
    assert PASSWORD not in caplog.text


def test_a_reused_provider_name_waits_until_the_earlier_relations_scalesets_are_gone(
    ctx, world, resources, machine: Machine, later
):
    # The configurator application serves under relation 1, a job running on its runner.
    model(machine, "garm/0", f"{APP}/0")
    relation = configurator(EXAMPLE_UNIT, id=1)
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    (earlier,) = world.scalesets()
    job = world.add_runner(earlier["id"], runner_status="active")
    later()
    # It is removed (its scaleset drains) and deployed again under its old name, with
    # another OpenStack project: relation 2, unit garm-configurator/0 again.
    model(machine, "garm/0")
    state = ctx.run(ctx.on.relation_broken(state.get_relation(relation.id)), state)
    state = dataclasses.replace(state, relations=[r for r in state.relations if r.id != 1])
    again = configurator({**EXAMPLE_UNIT, "openstack_project_name": "new-project"}, id=2)
    model(machine, "garm/0", f"{APP}/0")
    state = dataclasses.replace(state, relations=[*state.relations, again])
    state = ctx.run(ctx.on.relation_changed(again, remote_unit=0), state)
    clouds = machine.paths.config_dir / "providers" / f"{APP}-0-clouds.yaml"

    def project() -> str:
        return json.loads(clouds.read_text())["clouds"][f"{APP}-0"]["auth"]["project_name"]

    assert project() == "ci-runners"  # the earlier relation's, while its scaleset drains
    assert in_full(ctx, state) == ops.WaitingStatus(
        f"Waiting for {APP}/0: provider '{APP}-0' keeps the settings of an earlier "
        f"relation (id 1) while its scalesets drain (Removing scaleset lg-x64 "
        f"({earlier['name']}): draining 1 runner)"
    )
    assert [s["name"] for s in world.scalesets()] == [earlier["name"]]  # nothing created

    # The job ends; GARM hears of it, and the drained scaleset is deleted. Then, and not
    # before, the new relation's settings are GARM's and its scaleset is created.
    world.finish_job(job)
    for _ in range(3):
        later(CONSOLIDATION_INTERVAL)
        state = ctx.run(reconcile_tick(), state)
        if project() == "new-project":
            break
    assert earlier["id"] not in [s["id"] for s in world.scalesets()]
    state = ctx.run(reconcile_tick(), state)
    (created,) = world.scalesets()
    assert created["provider_name"] == f"{APP}-0"
    recorded = read_record(record_of(state).latest_content[PROVIDERS_KEY]) or ()
    assert [(r.provider.project_name, r.relation) for r in recorded] == [("new-project", 2)]
