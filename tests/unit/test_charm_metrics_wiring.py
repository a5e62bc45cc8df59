"""The charm's metrics through its lifecycle: written by every leader pass, served only
from the leader, taken away from a unit that does not lead, is dying, stops or goes."""

from __future__ import annotations

import dataclasses

import pytest

from observe.endpoint import SERVICE
from tests.charm_states import configurator, make_state
from tests.databags import SOLE_UNIT
from tests.juju_events import reconcile_tick, self_departing
from tests.machine import Machine, goal_state
from tests.metrics_text import checked, parse

pytestmark = pytest.mark.usefixtures("machine")


def served(machine: Machine) -> bool:
    paths = machine.paths
    return paths.metrics_unit_file.exists() and paths.metrics_file.exists()


def metrics(machine: Machine):
    return checked(machine.paths.metrics_file.read_text())


def test_every_leader_pass_writes_the_metrics_and_serves_them(
    ctx, world, resources, machine, clock, later
):
    state = make_state(
        world, resources, configurator(SOLE_UNIT), config={"reconcile-interval": 45}
    )
    state = ctx.run(ctx.on.config_changed(), state)

    assert served(machine)
    assert ["enable", SERVICE] in machine.systemctl.calls
    families = metrics(machine)
    assert families["garm_charm_last_pass_ok"].value() == 1
    assert families["garm_charm_reconcile_interval_seconds"].value() == 45
    assert families["garm_charm_last_pass_timestamp_seconds"].value() == clock.now.timestamp()
    assert families["garm_charm_scalesets"].value(phase="serving") == 1

    later()
    calls = len(machine.systemctl.calls)
    ctx.run(reconcile_tick(), state)
    assert (
        metrics(machine)["garm_charm_last_pass_timestamp_seconds"].value() == clock.now.timestamp()
    )
    # Installed and running already: the later pass only asks whether it still runs.
    assert [c for c in machine.systemctl.calls[calls:] if SERVICE in c] == [
        ["--quiet", "is-active", SERVICE]
    ]


def test_a_pass_stopped_by_an_invalid_config_still_says_so(ctx, world, resources, machine):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    bad = dataclasses.replace(state, config={**state.config, "reconcile-interval": 5})
    ctx.run(ctx.on.config_changed(), bad)

    families = parse(machine.paths.metrics_file.read_text())
    assert families["garm_charm_last_pass_ok"].value() == 0
    assert "garm_charm_scalesets" not in families
    assert "garm_charm_drain_deadline_seconds" not in families


def test_a_deposed_leader_serves_nothing(ctx, world, resources, machine):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    assert served(machine)

    ctx.run(ctx.on.leader_elected(), dataclasses.replace(state, leader=False))

    assert not served(machine) and not machine.paths.metrics_dir.exists()
    assert ["disable", "--now", SERVICE] in machine.systemctl.calls


def test_a_dying_unit_serves_nothing(ctx, world, resources, machine):
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state("garm-configurator/0")
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, relation))
    relation = state.get_relation(relation.id)
    with self_departing("garm/0"):
        ctx.run(ctx.on.relation_departed(relation, remote_unit=0), state)
    assert not served(machine)


def test_stop_and_remove_take_the_endpoint_away(ctx, world, resources, machine):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    state = ctx.run(ctx.on.stop(), state)
    assert not served(machine)
    ctx.run(ctx.on.remove(), state)
    paths = machine.paths
    assert not [
        p
        for p in (paths.metrics_unit_file, paths.metrics_server, paths.metrics_state)
        if p.exists()
    ]
