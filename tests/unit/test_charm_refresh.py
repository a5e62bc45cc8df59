"""An image builder publishes a new image: the real charm refreshes the warm pool.

Hook by hook through ops.testing against the GARM double (docs/adr/0010): the
configurator's new ``image_id`` updates the scaleset in place and notes the change; the
idle runners made before are then replaced one at a time on the reconcile timer's ticks,
told in the status, in the ``plan`` action and to the configurator, until the scaleset
is in sync again. Turned off, nothing is replaced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import ops
import pytest
from charms.garm_machine.v0.garm_configurator import GarmAppData
from ops import testing

from scalesets.refresh import REFRESH_MARGIN
from tests.charm_states import configurator, in_full, make_state, publish
from tests.databags import SOLE_UNIT
from tests.garm_double import GarmDouble
from tests.juju_events import reconcile_tick

pytestmark = pytest.mark.usefixtures("machine")

WARM_UNIT = {**SOLE_UNIT, "min_idle_runner": "2", "max_runner": "4"}
NEW_IMAGE = "7e6d5c4b-3a29-4817-a6f5-e4d3c2b1a098"


def idle(garm: GarmDouble) -> list[str]:
    return [
        i["name"]
        for i in garm.instances()
        if i["status"] == "running" and i["runner_status"] == "idle"
    ]


def told(state: testing.State) -> dict:
    """What the configurator is told of its unit's scaleset."""
    (relation,) = [r for r in state.relations if r.endpoint == "garm-configurator"]
    return (
        GarmAppData.from_databag(relation.local_app_data)
        .scalesets["garm-configurator/0"]
        .to_dict()
    )


def warm(ctx, world, resources, later: Callable, **config) -> testing.State:
    """The scaleset served and its two idle runners up, as the timer's ticks leave it."""
    state = make_state(world, resources, configurator(WARM_UNIT), config=config)
    state = ctx.run(ctx.on.install(), state)
    for _ in range(3):
        later()
        state = ctx.run(reconcile_tick(), state)
    assert len(idle(world)) == 2
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    return state


def new_image(ctx, state: testing.State) -> testing.State:
    state, relation = publish(state, 1, 0, {**WARM_UNIT, "image_id": NEW_IMAGE})
    return ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)


def test_a_new_image_refreshes_the_warm_pool_one_runner_at_a_time(ctx, world, resources, later):
    state = warm(ctx, world, resources, later)
    old = set(idle(world))
    state = new_image(ctx, state)
    (scaleset,) = world.scalesets()
    assert scaleset["image"] == NEW_IMAGE
    name = scaleset["name"]
    assert state.unit_status == ops.ActiveStatus(
        f"Refreshing scaleset sm-x64 ({name}): 2 idle runners made before its last change"
    )
    assert told(state) == {
        "phase": "serving",
        "name": "sm-x64",
        "scaleset": name,
        "message": "refreshing 2 idle runners",
    }
    assert world.removals == []

    later(REFRESH_MARGIN)
    ctx.run(ctx.on.action("plan"), state)
    assert ctx.action_results is not None
    (first,) = ctx.action_results["actions"].splitlines()
    assert first.startswith("refresh runner garm-") and first.endswith(f"of sm-x64 ({name})")
    assert ctx.action_results["phases"].startswith(f"Refreshing scaleset sm-x64 ({name})")
    assert world.removals == []  # the plan wrote nothing

    for _ in range(20):
        before = len(world.removals)
        state = ctx.run(reconcile_tick(), state)
        assert len(world.removals) - before <= 1  # one at a time
        assert len(idle(world)) >= 1  # min-idle-runner - 1
        if state.unit_status == ops.ActiveStatus("1 scaleset in sync"):
            break
        later()
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert {name for name, *_ in world.removals} == old
    assert not any(force for *_, force in world.removals)
    assert told(state) == {"phase": "serving", "name": "sm-x64", "scaleset": name}


def test_turned_off_a_new_image_replaces_no_idle_runner(ctx, world, resources, later):
    state = warm(ctx, world, resources, later, **{"refresh-idle-runners": False})
    state = new_image(ctx, state)
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    for _ in range(3):
        later(REFRESH_MARGIN)
        state = ctx.run(reconcile_tick(), state)
    assert world.removals == []
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    # Turned on again, the runners made before the change are refreshed after all.
    on = dataclasses.replace(state, config={**state.config, "refresh-idle-runners": True})
    state = ctx.run(ctx.on.config_changed(), on)
    assert len(world.removals) == 1


def test_a_refresh_whose_runners_never_come_is_put_to_the_operator(ctx, world, resources, later):
    # A quota, or a new flavor or image that fails: the replacement of the first runner
    # refreshed never reports idle, so the refresh cannot go on. It said "Refreshing …"
    # forever; now the wait ends: blocked after 30 minutes, with what to do, and it goes
    # on by itself once GARM makes the runners again.
    peers = testing.PeerRelation("garm-peers", id=9)  # where the waits are timed
    state = make_state(world, resources, configurator(WARM_UNIT), peers)
    state = ctx.run(ctx.on.install(), state)
    for _ in range(3):
        later()
        state = ctx.run(reconcile_tick(), state)
    assert len(idle(world)) == 2
    state = new_image(ctx, state)
    (scaleset,) = world.scalesets()
    name = scaleset["name"]
    later(REFRESH_MARGIN)
    state = ctx.run(reconcile_tick(), state)
    assert len(world.removals) == 1
    world.auto_report = False  # its replacement is made, and never comes online
    refreshing = ops.ActiveStatus(
        f"Refreshing scaleset sm-x64 ({name}): 1 idle runner made before its last change"
    )
    statuses = []
    for _ in range(70):  # 35 minutes of the timer's passes
        later()
        state = ctx.run(reconcile_tick(), state)
        statuses.append(in_full(ctx, state))
    assert statuses[:55] == [refreshing] * 55  # 27.5 minutes: still a wait
    assert statuses[-1] == ops.BlockedStatus(
        f"Stuck: sm-x64: GARM has not made {name} up to 2 idle runners in 30 minutes of its "
        "refresh: check its provider (quota, flavor, image) in /var/log/garm/garm.log, or "
        f"set refresh-idle-runners=false (Refreshing scaleset sm-x64 ({name}): 1 idle runner "
        "made before its last change)"
    )
    assert len(world.removals) == 1
    world.auto_report = True
    for _ in range(10):
        later()
        state = ctx.run(reconcile_tick(), state)
    assert in_full(ctx, state) == ops.ActiveStatus("1 scaleset in sync")
