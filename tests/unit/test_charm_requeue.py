"""The extra pass through the real charm: asked for when the pass can next make progress.

A label change creates the new generation, and the hook asks systemd for one pass when
its listener counts as open (``garm.requeue``, ``machine.systemctl.requeue_due``); that
pass, a ``reconcile-tick`` as the transient timer dispatches it, finishes the changeover
long before the periodic timer would. A settled GARM asks for none, and a unit that
stops leading takes the pending one away.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from garm import requeue
from scalesets.planner import LISTENER_STARTUP
from tests.charm_states import configurator, live_names, make_state, publish
from tests.databags import SOLE_UNIT
from tests.juju_events import reconcile_tick
from tests.machine import Machine

pytestmark = pytest.mark.usefixtures("machine")

STOP = ["stop", f"{requeue.PREFIX}*.timer"]
ARM = "self-hosted,linux,arm64"


def asked(machine: Machine) -> list[list[str]]:
    return [c for c in machine.systemctl.calls if c[0] == "systemd-run"]


def relabelled(ctx, state):
    """The configurator unit asks for other labels, and garm's relation-changed runs."""
    state, relation = publish(state, 1, 0, {**SOLE_UNIT, "labels": ARM})
    return ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)


def settled(ctx, world, resources, clock):
    state = ctx.run(ctx.on.config_changed(), make_state(world, resources, configurator(SOLE_UNIT)))
    clock.advance(timedelta(hours=1))
    world.tick()
    return ctx.run(ctx.on.update_status(), state)


def test_a_label_change_is_finished_by_the_pass_it_asks_for(ctx, world, resources, machine, clock):
    state = settled(ctx, world, resources, clock)
    (old,) = live_names(world)

    state = relabelled(ctx, state)

    created = clock()
    assert len(live_names(world)) == 2  # the new generation, beside the old one
    assert machine.systemctl.requeue_due == created + LISTENER_STARTUP
    # The transient timer elapses: its dispatch is the reconcile-tick of the periodic one.
    clock.advance(LISTENER_STARTUP)
    world.tick()
    assert machine.systemctl.fire_requeue()
    state = ctx.run(reconcile_tick(), state)

    assert old not in live_names(world) and len(live_names(world)) == 1
    assert state.unit_status.name == "active"
    # Nothing waits on time any more: no pass is asked for, none is pending.
    assert machine.systemctl.requeue_due is None
    assert len(asked(machine)) == 1


@pytest.mark.parametrize("after_create", [7.0, 7.4, 7.9])
def test_a_timer_pass_just_before_the_listener_moment_keeps_the_change_within_10_s(
    ctx, world, resources, machine, clock, after_create
):
    """Issue #32, case 9: the periodic timer's pass lands some seconds after the new
    generation's create, before its listener counts as open; the pass it asks for comes
    at that moment (rounded up to systemd's whole second), and the change is done within
    10 s of it. The create takes GARM's time (its calls to GitHub), as on a real GARM."""
    state = settled(ctx, world, resources, clock)
    (old,) = live_names(world)
    world.create_takes = timedelta(seconds=0.2)
    changed = clock()

    state = relabelled(ctx, state)
    created = clock()
    clock.advance(timedelta(seconds=after_create))
    world.tick()
    state = ctx.run(reconcile_tick(), state)  # the periodic timer's pass: still waiting
    assert len(live_names(world)) == 2
    due = machine.systemctl.requeue_due
    assert due is not None and created + LISTENER_STARTUP <= due
    clock.advance(due - clock())
    world.tick()
    assert machine.systemctl.fire_requeue()
    state = ctx.run(reconcile_tick(), state)

    assert old not in live_names(world) and len(live_names(world)) == 1
    assert clock() - changed <= timedelta(seconds=10)


def test_a_settled_hook_asks_for_no_pass_and_calls_no_systemd_for_it(
    ctx, world, resources, machine, clock
):
    state = settled(ctx, world, resources, clock)
    calls = len(machine.systemctl.calls)

    ctx.run(reconcile_tick(), state)

    new = machine.systemctl.calls[calls:]
    assert [c for c in new if c[0] == "systemd-run" or c == STOP] == []


def test_a_unit_that_stops_leading_takes_the_pending_pass_away(
    ctx, world, resources, machine, clock
):
    state = settled(ctx, world, resources, clock)
    state = relabelled(ctx, state)
    assert machine.systemctl.requeue_due is not None

    assert machine.paths.admin_token_file.exists()

    ctx.run(ctx.on.update_status(), dataclasses.replace(state, leader=False))

    assert not machine.paths.admin_token_file.exists()  # GARM's token goes with the lead

    assert machine.systemctl.calls[-1] == STOP or STOP in machine.systemctl.calls
    assert machine.systemctl.requeue_due is None
    assert not machine.paths.requeue_file.exists()


def test_a_config_that_does_not_read_takes_the_pending_pass_away(
    ctx, world, resources, machine, clock
):
    state = settled(ctx, world, resources, clock)
    state = relabelled(ctx, state)
    assert machine.systemctl.requeue_due is not None

    bad = dataclasses.replace(state, config={**state.config, "reconcile-interval": 5})
    state = ctx.run(ctx.on.config_changed(), bad)

    assert state.unit_status.name == "blocked"
    assert machine.systemctl.requeue_due is None


def test_systemd_refusing_the_pass_fails_no_hook(ctx, world, resources, machine, clock):
    state = settled(ctx, world, resources, clock)
    machine.systemctl.failing.add("systemd-run")

    state = relabelled(ctx, state)

    assert len(live_names(world)) == 2
    assert state.unit_status.name in ("active", "maintenance")
    assert machine.systemctl.requeue_due is None


def test_plan_tells_when_the_pass_after_the_next_would_come(ctx, world, resources, clock):
    state = settled(ctx, world, resources, clock)
    ctx.run(ctx.on.action("plan"), state)
    assert ctx.action_results is not None
    assert ctx.action_results["next-pass"] == "the reconcile timer's, within 30s"

    state, _ = publish(state, 1, 0, {**SOLE_UNIT, "labels": ARM})
    ctx.run(ctx.on.action("plan"), state)

    # The create it would make: a pass when the new generation's listener counts as open.
    assert ctx.action_results["actions"].startswith("create scaleset")
    assert ctx.action_results["next-pass"] == f"in {LISTENER_STARTUP.seconds}s"


def test_a_drain_waiting_on_a_job_asks_for_no_pass_before_the_timer(
    ctx, world, resources, machine, clock
):
    """Only GitHub knows when the job ends; its drain deadline is hours away, after the
    periodic timer's run: no extra pass (the leader bounds the moment by the timer)."""
    state = settled(ctx, world, resources, clock)
    (old,) = world.scalesets()
    world.add_runner(old["id"], runner_status="active")
    state = relabelled(ctx, state)
    clock.advance(LISTENER_STARTUP)
    world.tick()
    assert machine.systemctl.fire_requeue()

    state = ctx.run(reconcile_tick(), state)  # hands over: the old one retired, draining

    assert not next(s for s in world.scalesets() if s["id"] == old["id"]).get("enabled")
    assert "draining 1 runner" in state.unit_status.message
    assert machine.systemctl.requeue_due is None
    assert len(asked(machine)) == 1  # the listener's, and none since


def test_the_first_hook_after_the_secrets_are_made_is_juju_s_own(ctx, world, resources, machine):
    """A new leader's first pass makes its secrets; Juju's next hook (config-changed,
    start) uses them, so no extra pass is asked for: none that a secret which does not
    read would repeat every few seconds."""
    state = make_state(world, resources, configurator(SOLE_UNIT))
    state = dataclasses.replace(state, secrets=[])

    state = ctx.run(ctx.on.install(), state)

    assert state.unit_status.message == "Secrets created; GARM is set up on the next hook"
    assert asked(machine) == []
