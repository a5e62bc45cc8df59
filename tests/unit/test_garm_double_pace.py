"""The GARM double's runner pace on the clock: ``runner_boot`` and ``runner_delete``.

Both are off by default, and then a runner moves a step a tick (row, running, idle; and
a row on its way out reaped on the next tick), so how long a runner takes is how often
the caller ticks. Set, a runner reports idle only once ``runner_boot`` has passed since
its row was made, and goes only once its provider has had ``runner_delete`` since it took
the deletion lane, however often the caller ticks (docs/reference/garm-api.md §8: about
28 s from a scale set's create to its first runner idle, 4-5 s from both counts set to 0
to the idle runner gone).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.clock import FakeClock
from tests.garm_double import LISTENER_DELAY, GarmDouble
from tests.unit.test_garm_double_two_processes import Api, create_scaleset

SECOND = timedelta(seconds=1)


def runners(garm: GarmDouble, scaleset_id: int) -> list[dict[str, Any]]:
    return [i for i in garm.instances() if i["scale_set_id"] == scaleset_id]


def tick_until(garm: GarmDouble, clock: FakeClock, done, most: int = 120) -> int:
    """Tick every second until ``done()``; returns the seconds it took."""
    for second in range(1, most + 1):
        clock.advance(SECOND)
        garm.tick()
        if done():
            return second
    raise AssertionError(f"not done after {most} s")


def warm(garm: GarmDouble) -> int:
    garm.add_provider("openstack")
    return create_scaleset(garm, garm.url, min_idle_runners=1)


def idle(garm: GarmDouble, scaleset_id: int) -> bool:
    return any(i["runner_status"] == "idle" for i in runners(garm, scaleset_id))


def test_by_default_a_runner_is_idle_on_the_third_tick_whatever_the_clock(
    garm: GarmDouble, clock: FakeClock
):
    assert garm.runner_boot is None and garm.runner_delete is None
    scaleset = warm(garm)
    seen = []
    for _ in range(3):
        clock.advance(timedelta(minutes=1))
        garm.tick()
        ((row,),) = [runners(garm, scaleset)]
        seen.append((row["status"], row["runner_status"]))
    assert seen == [("creating", "pending"), ("running", "pending"), ("running", "idle")]


def test_with_a_boot_time_a_runner_reports_idle_that_long_after_its_row(
    garm: GarmDouble, clock: FakeClock
):
    garm.runner_boot = timedelta(seconds=27)
    scaleset = warm(garm)
    created = clock.now
    tick_until(garm, clock, lambda: bool(runners(garm, scaleset)))
    (row,) = runners(garm, scaleset)
    made = datetime.fromisoformat(row["created_at"])
    assert made == created + SECOND
    took = tick_until(garm, clock, lambda: idle(garm, scaleset))
    assert clock.now - made == timedelta(seconds=27)
    assert clock.now - created == timedelta(seconds=28)
    assert took == 27
    (row,) = runners(garm, scaleset)
    assert row["status"] == "running"


def test_with_a_delete_time_a_retired_idle_runner_goes_that_long_after_it_took_the_lane(
    garm: GarmDouble, clock: FakeClock
):
    garm.runner_delete = timedelta(seconds=4)
    scaleset = warm(garm)
    tick_until(garm, clock, lambda: idle(garm, scaleset))
    Api(garm, garm.url).call(
        "PUT", f"/scalesets/{scaleset}", {"min_idle_runners": 0, "max_runners": 0}
    )
    retired = clock.now
    marked = tick_until(
        garm,
        clock,
        lambda: (
            bool(runners(garm, scaleset))
            and all(i["status"] == "pending_delete" for i in runners(garm, scaleset))
        ),
    )
    assert marked == 1
    tick_until(garm, clock, lambda: not runners(garm, scaleset))
    assert clock.now - retired == timedelta(seconds=5)  # GARM: 4-5 s


def test_without_a_delete_time_the_same_runner_goes_on_the_next_tick(
    garm: GarmDouble, clock: FakeClock
):
    scaleset = warm(garm)
    tick_until(garm, clock, lambda: idle(garm, scaleset))
    Api(garm, garm.url).call(
        "PUT", f"/scalesets/{scaleset}", {"min_idle_runners": 0, "max_runners": 0}
    )
    retired = clock.now
    tick_until(garm, clock, lambda: not runners(garm, scaleset))
    assert clock.now - retired == 2 * SECOND  # marked on one tick, reaped on the next


def test_a_delete_its_provider_fails_is_retried_as_before_with_a_delete_time(
    garm: GarmDouble, clock: FakeClock
):
    garm.runner_delete = timedelta(seconds=4)
    scaleset = warm(garm)
    tick_until(garm, clock, lambda: idle(garm, scaleset))
    (row,) = runners(garm, scaleset)
    garm.provider_cannot_delete(row["name"])
    Api(garm, garm.url).call(
        "PUT", f"/scalesets/{scaleset}", {"min_idle_runners": 0, "max_runners": 0}
    )
    for _ in range(60):
        clock.advance(SECOND)
        garm.tick()
    (row,) = runners(garm, scaleset)
    assert row["status"] == "pending_delete"
    garm.providers_recover()
    tick_until(garm, clock, lambda: not runners(garm, scaleset))


def test_reset_turns_both_paces_off(garm: GarmDouble):
    garm.runner_boot = garm.runner_delete = timedelta(seconds=3)
    garm.reset()
    assert garm.runner_boot is None and garm.runner_delete is None


def test_a_create_takes_create_takes_on_the_clock_and_the_listener_counts_from_its_end(
    garm: GarmDouble, clock: FakeClock
):
    """GARM creates the scale set on GitHub before it stores the row (§2.3): the row is
    stamped, and the listener opens ``LISTENER_DELAY`` later, once that has taken its time."""
    garm.add_provider("openstack")
    garm.create_takes = timedelta(seconds=0.2)
    asked = clock.now

    scaleset = create_scaleset(garm, garm.url)

    assert clock.now == asked + garm.create_takes
    (row,) = [s for s in garm.scalesets() if s["id"] == scaleset]
    assert datetime.fromisoformat(row["created_at"]) == clock.now
    clock.advance(LISTENER_DELAY - timedelta(seconds=0.1))
    garm.tick()
    assert not garm.listening(scaleset)
    clock.advance(timedelta(seconds=0.1))
    garm.tick()
    assert garm.listening(scaleset)
