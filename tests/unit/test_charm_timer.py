"""The reconcile timer through the charm's lifecycle: where it is, and what a tick does.

The timer lives on the leader while GARM runs there, and nowhere else: a non-leader, a
unit being removed and a stopped unit take it away, and ``reconcile-interval: 0`` does
too. A tick (what the timer dispatches through juju-exec) runs the leader's pass, and
does nothing on a unit that must not reconcile, because juju-exec also runs on those.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import ops
import pytest
from ops import testing

from leader import BEING_REMOVED, STANDING_BY
from tests.charm_states import configurator, make_state, publish
from tests.databags import SOLE_UNIT
from tests.juju_events import reconcile_tick, self_departing
from tests.machine import Machine, goal_state

pytestmark = pytest.mark.usefixtures("machine")

TIMER_COMMANDS = (
    ["enable", "--now", "garm-reconcile.timer"],
    ["disable", "--now", "garm-reconcile.timer"],
)


def timer_on(machine: Machine) -> bool:
    return machine.paths.timer_file.exists() and machine.paths.timer_service_file.exists()


def test_the_leader_running_garm_installs_the_timer_every_interval(ctx, world, resources, machine):
    state = make_state(
        world, resources, configurator(SOLE_UNIT), config={"reconcile-interval": 45}
    )
    ctx.run(ctx.on.config_changed(), state)
    assert timer_on(machine)
    text = machine.paths.timer_file.read_text()
    assert "OnUnitInactiveSec=45s" in text
    assert ["enable", "--now", "garm-reconcile.timer"] in machine.systemctl.calls
    service = machine.paths.timer_service_file.read_text()
    assert "garm/0" in service and "hooks/reconcile-tick" in service


def test_a_second_pass_with_the_timer_in_place_touches_nothing(ctx, world, resources, machine):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    calls = len(machine.systemctl.calls)
    ctx.run(reconcile_tick(), state)
    assert [c for c in machine.systemctl.calls[calls:] if c in TIMER_COMMANDS] == []


def test_interval_zero_removes_the_timer(ctx, world, resources, machine):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert timer_on(machine)
    off = dataclasses.replace(state, config={**state.config, "reconcile-interval": 0})
    ctx.run(ctx.on.config_changed(), off)
    assert not timer_on(machine)
    assert ["disable", "--now", "garm-reconcile.timer"] in machine.systemctl.calls


def test_an_invalid_interval_blocks_and_leaves_the_timer_as_it_was(ctx, world, resources, machine):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    before = machine.paths.timer_file.read_text()
    bad = dataclasses.replace(state, config={**state.config, "reconcile-interval": 5})
    state = ctx.run(ctx.on.config_changed(), bad)
    assert state.unit_status.name == "blocked"
    assert state.unit_status.message.startswith("Invalid config: reconcile-interval:")
    assert machine.paths.timer_file.read_text() == before


def test_a_deposed_leader_removes_its_timer_and_a_tick_there_does_nothing(
    ctx, world, resources, machine
):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    writes = len(world.writes())
    follower = dataclasses.replace(state, leader=False)
    state = ctx.run(ctx.on.leader_elected(), follower)
    assert not timer_on(machine)
    state = ctx.run(reconcile_tick(), state)
    assert state.unit_status == ops.ActiveStatus(STANDING_BY)
    assert not timer_on(machine)
    assert world.writes()[writes:] == []


def test_the_first_hook_of_a_dying_unit_removes_the_timer_and_its_ticks_change_nothing(
    ctx, world, resources, machine
):
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state("garm-configurator/0")
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, relation))
    assert timer_on(machine)
    (serving,) = world.scalesets()
    relation = state.get_relation(relation.id)  # as the last hook left it (app data)
    with self_departing("garm/0"):
        state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0), state)
    assert not timer_on(machine)
    # juju-exec still runs between the dying unit's hooks: a tick then is no pass.
    state = ctx.run(reconcile_tick(), state)
    assert state.unit_status == ops.MaintenanceStatus(BEING_REMOVED)
    assert world.scalesets() == [serving]
    assert not timer_on(machine)


def test_stop_and_remove_take_the_timer_away(ctx, world, resources, machine):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    state = ctx.run(ctx.on.stop(), state)
    assert not timer_on(machine)
    ctx.run(ctx.on.remove(), state)
    assert not machine.paths.timer_service_file.exists()


def test_a_tick_moves_a_changeover_on_without_any_hook(ctx, world, resources, later):
    relation = configurator(SOLE_UNIT)
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, relation))
    later()
    state, relation = publish(state, relation.id, 0, {**SOLE_UNIT, "labels": "linux,arm64"})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert len(world.scalesets()) == 2
    later()
    state = ctx.run(reconcile_tick(), state)
    assert len(world.scalesets()) == 1
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")


def test_no_timer_until_garm_runs_on_the_leader(ctx, world, resources, machine):
    # Juju hands a charm an empty file for a resource nobody uploaded yet.
    Path(next(r for r in resources if r.name == "garm").path).write_bytes(b"")
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert state.unit_status.message.startswith("Attach the garm resource")
    assert not timer_on(machine)


def test_refusals_live_in_the_applications_peer_data(ctx, world, resources, machine):
    peers = testing.PeerRelation("garm-peers", id=7)
    world.inject(
        "POST",
        r"/organizations/.+/scalesets",
        status=404,
        error="Not Found",
        details="getting runner group ID: runner group nope not found",
    )
    unit = {**SOLE_UNIT, "runner_group": "nope"}
    state = ctx.run(
        ctx.on.config_changed(), make_state(world, resources, configurator(unit), peers)
    )
    assert state.unit_status.name == "blocked"
    assert "runner group nope not found" in state.unit_status.message
    kept = state.get_relation(peers.id).local_app_data["refusals"]
    assert '"create:sm-x64"' in kept and '"refusals":1' in kept
    # The next pass reads it from there (as a new leader would: it is the application's,
    # not this unit's) and does not hit GitHub again within the back-off.
    writes = len(world.writes())
    state = ctx.run(reconcile_tick(), state)
    assert world.writes()[writes:] == []
    assert "runner group nope not found" in state.unit_status.message


def test_a_hand_edited_memory_is_ignored_where_it_does_not_read_and_said(
    ctx, world, resources, machine, caplog
):
    # Someone ran relation-set on the peer data: what reads is kept, the rest ignored, the
    # hook goes on, and the log says so; the pass writes the memory back as it reads.
    edited = '{"refusals":{"create:sm-x64":{"refusals":"many"}},"taken":[]}'
    peers = testing.PeerRelation("garm-peers", id=7, local_app_data={"refusals": edited})
    state = ctx.run(
        ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT), peers)
    )
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert "ignored what could not be read of the peer data's refusals" in caplog.text
    caplog.clear()
    state = ctx.run(reconcile_tick(), state)
    assert "could not be read" not in caplog.text
