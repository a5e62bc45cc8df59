"""Pause and resume through the real charm (``paused``, ADR 0014).

While paused the leader writes nothing to GARM, neither its setup nor its scalesets,
and says since when; GARM runs on and serves; ``plan`` answers what a resume would do;
the resume carries on from what GARM holds then.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import ops
import pytest
from ops import testing

from garm.refusals import Refusals
from juju import status
from juju.peers import MEMORY_KEY, PEERS
from leader import PAUSED
from tests.charm_states import configurator, make_state, publish
from tests.databags import SOLE_UNIT
from tests.juju_events import reconcile_tick
from tests.metrics_text import parse

pytestmark = pytest.mark.usefixtures("machine")

RELABELLED = {**SOLE_UNIT, "labels": "linux,arm64"}


def writes(world) -> list:
    return [r for r in world.requests if r.method != "GET"]


def paused(state: testing.State, value: bool = True) -> testing.State:
    return dataclasses.replace(state, config={**state.config, "paused": value})


def memory(state: testing.State) -> Refusals:
    (peer,) = [r for r in state.relations if r.endpoint == PEERS]
    return Refusals.read(peer.local_app_data.get(MEMORY_KEY))


@pytest.fixture
def serving(ctx, world, resources, clock) -> testing.State:
    """The leader serving one scaleset, in sync, with its peer relation."""
    peer = testing.PeerRelation(PEERS, id=99)
    state = make_state(world, resources, configurator(SOLE_UNIT), peer)
    state = ctx.run(ctx.on.install(), state)
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    return state


def test_paused_a_label_change_writes_nothing_and_garm_serves_on(
    ctx, world, serving, later, clock, machine
):
    state = ctx.run(ctx.on.config_changed(), paused(serving))
    since = clock.now
    before = len(writes(world))
    state, relation = publish(state, 1, 0, RELABELLED)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    for _ in range(3):
        later(timedelta(minutes=5))
        state = ctx.run(reconcile_tick(), state)
    assert len(writes(world)) == before
    message = f"Paused since {since:%Y-%m-%d %H:%M} UTC: juju config garm paused=false resumes"
    assert state.unit_status == ops.MaintenanceStatus(message)
    # GARM runs on, reachable, its timer kept: only the charm's writes stop.
    assert state.opened_ports == frozenset({testing.TCPPort(int(state.config["api-port"]))})
    assert machine.paths.timer_file.exists()
    assert [s["name"] for s in world.scalesets()] == [world.scalesets()[0]["name"]]


def test_paused_no_setup_write_either_and_the_resume_makes_it(ctx, world, serving, later):
    state = ctx.run(ctx.on.config_changed(), paused(serving))
    before = len(writes(world))
    # The configurator's unit now serves another organisation: GARM's setup registers it.
    world.add_org("another-org")
    state, relation = publish(state, 1, 0, {**SOLE_UNIT, "org": "another-org"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert len(writes(world)) == before
    later()
    ctx.run(ctx.on.config_changed(), paused(state, False))
    assert writes(world)[before:]


def test_plan_while_paused_shows_what_a_resume_would_do_and_the_resume_does_it(
    ctx, world, serving, later
):
    state = ctx.run(ctx.on.config_changed(), paused(serving))
    state, relation = publish(state, 1, 0, RELABELLED)
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    ctx.run(ctx.on.action("plan"), state)
    results = ctx.action_results
    assert results is not None and results["paused"] == "yes"
    assert "create scaleset" in str(results["actions"])
    before = len(writes(world))
    later()
    state = ctx.run(ctx.on.config_changed(), paused(state, False))
    assert any(r.method == "POST" and "/scalesets" in r.path for r in writes(world)[before:])
    assert state.unit_status.name == "active"
    assert PAUSED not in memory(state).waits


def test_the_pause_keeps_its_first_moment_and_a_later_pause_starts_afresh(
    ctx, world, serving, clock, later
):
    state = ctx.run(ctx.on.config_changed(), paused(serving))
    first = clock.now
    later(timedelta(hours=3))
    state = ctx.run(reconcile_tick(), state)
    assert f"Paused since {first:%Y-%m-%d %H:%M} UTC" in state.unit_status.message
    assert memory(state).waits[PAUSED] == first
    # Resumed while a unit's data is held: that pass's plan does not look at everything.
    state, relation = publish(state, 1, 0, {**SOLE_UNIT, "max_runner": "none"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    state = ctx.run(ctx.on.config_changed(), paused(state, False))
    assert state.unit_status.name == "blocked"
    later(timedelta(hours=1))
    state = ctx.run(ctx.on.config_changed(), paused(state))
    assert f"Paused since {clock.now:%Y-%m-%d %H:%M} UTC" in state.unit_status.message


def test_paused_the_metrics_go_on_telling_the_fleet_and_no_pass_failed(
    ctx, world, serving, machine
):
    # A pause is no failing pass (GarmPassesFailing), and the dashboards keep the fleet.
    state = ctx.run(ctx.on.config_changed(), paused(serving))
    state, relation = publish(state, 1, 0, RELABELLED)
    ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    families = parse(machine.paths.metrics_file.read_text())
    assert families["garm_charm_last_pass_ok"].value() == 1
    assert families["garm_charm_scalesets"].by("phase")["creating"] == 1  # what it waits on


def test_the_paused_line_names_the_application_as_deployed_within_120_characters(clock):
    assert status.paused(clock.now, "ci-garm").line.endswith(
        "juju config ci-garm paused=false resumes"
    )
    long = status.paused(clock.now, "a" * 60)
    assert long.line == f"Paused since {clock.now:%Y-%m-%d %H:%M} UTC …"  # no half command
    assert long.message.endswith(f"juju config {'a' * 60} paused=false resumes")
