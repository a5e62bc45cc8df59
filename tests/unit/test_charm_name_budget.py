"""The scaleset name budget changed through the real charm while a job runs (#32, case 3).

Lowering ``scaleset-name-budget`` replaces a generation whose name no longer fits by a
short-named one of the same key (docs/adr/0001). Raising it back while the long-named
generation still drains a job makes both names fit again: the one that serves stays
current, so nothing is re-enabled, retired or built, and the job runs on.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from scalesets.planner import LISTENER_STARTUP
from tests.charm_states import configurator, make_state
from tests.databags import SOLE_UNIT
from tests.juju_events import reconcile_tick

pytestmark = pytest.mark.usefixtures("machine")

BUDGET = "scaleset-name-budget"


def budget(ctx, state, value: int):
    """The operator sets the name budget: ``juju config garm scaleset-name-budget=…``."""
    return ctx.run(
        ctx.on.config_changed(), dataclasses.replace(state, config={**state.config, BUDGET: value})
    )


def by_name(world) -> dict[str, dict]:
    return {s["name"]: s for s in world.scalesets()}


def test_raising_the_budget_back_keeps_the_serving_generation_and_the_job(
    ctx, world, resources, later
):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    (long,) = world.scalesets()
    assert len(long["name"]) == 9  # "sm-" and the hash: fits 10, not 8
    later(timedelta(hours=1))
    busy = world.add_runner(long["id"], runner_status="active")

    # Lowered: a short-named generation of the same key is made and handed over to;
    # the long-named one is retired and drains the job.
    state = budget(ctx, state, 8)
    (short,) = [s for s in world.scalesets() if s["id"] != long["id"]]
    assert len(short["name"]) == 8 and short["name"][-6:] == long["name"][-6:]
    later(LISTENER_STARTUP)
    state = ctx.run(reconcile_tick(), state)
    live = by_name(world)
    assert live[short["name"]].get("enabled") is True
    assert not live[long["name"]].get("enabled")
    assert [i["name"] for i in world.instances() if i["scale_set_id"] == long["id"]] == [busy]

    # Raised back while the job still runs: both names fit, the short one serves.
    writes = len(world.writes())
    state = budget(ctx, state, 10)
    assert not by_name(world)[long["name"]].get("enabled")  # not re-enabled by the hook
    for _ in range(3):  # past its listener's start and a timer pass or two
        later()
        state = ctx.run(reconcile_tick(), state)
    live = by_name(world)
    assert live[short["name"]].get("enabled") is True  # nothing retired
    assert not live[long["name"]].get("enabled")  # nothing re-enabled
    assert sorted(live) == sorted([long["name"], short["name"]])  # nothing built
    scaleset_writes = [w for w in world.writes()[writes:] if "/scalesets" in w.path]
    assert scaleset_writes == []
    (job,) = [i for i in world.instances() if i["name"] == busy]
    assert job["runner_status"] == "active" and job["scale_set_id"] == long["id"]
    assert state.unit_status.name == "active"
    assert "draining 1 runner" in state.unit_status.message

    # The job ends: the drained generation goes, the short one serves alone.
    world.finish_job(busy)
    for _ in range(12):  # the consolidation that hears of it, then the delete
        later()
        state = ctx.run(reconcile_tick(), state)
    assert [s["name"] for s in world.scalesets()] == [short["name"]]
    assert world.scalesets()[0].get("enabled") is True
