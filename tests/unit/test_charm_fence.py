"""One GARM at a time, through the real charm: two garm units on one PostgreSQL.

Each unit has its own sandboxed machine whose systemd plays GARM's lease as the rendered
units make it behave (``tests.machine.LeasedSystemd``): GARM runs from a restart until a
stop, cannot start without a lease, and is stopped by the lease's timer once the lease
lapsed, with no hook at all. Leadership moves as Juju moves it (docs/explanation/
juju-lifecycle.md §3): the new leader gets ``leader-elected``; the old one
``leader-settings-changed`` at its next hook, or never while its agent is cut off.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import re
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import ops
import pytest
import scenario.mocking
from ops import testing
from scenario.errors import UncaughtCharmError

from charm import GarmCharm
from garm import lease, workload
from garm.config import START_LIMIT_BURST
from juju import fence
from juju.peers import DATA_KEY, PEERS
from leader import BEING_REMOVED
from tests.charm_states import configurator, make_state, relate_postgresql
from tests.clock import FakeClock
from tests.databags import SOLE_UNIT
from tests.garm_double import CONSOLIDATION_INTERVAL, GarmDouble
from tests.juju_events import leader_settings_changed, reconcile_tick
from tests.machine import LeasedSystemd, goal
from tests.postgresql import REL_ID

PEER_ID = 99
LEASE = fence.lease_seconds(30)  # the default reconcile-interval's
# The longest the new leader waits for a unit that never says its GARM stopped.
FENCE = timedelta(seconds=LEASE + fence.CHECK_SECONDS + fence.MARGIN_SECONDS)


class Unit:
    """One garm unit: its context, machine and chained State."""

    def __init__(self, number: int, root: Path, clock: FakeClock, router: _Router, garm):
        self.name = f"garm/{number}"
        self.number = number
        self.ctx = testing.Context(GarmCharm, app_name="garm", unit_id=number)
        self.paths = workload.Paths(root / f"garm-{number}")
        # This machine's GARM is a process of its own on the shared database.
        self.garm = garm
        self.systemd = LeasedSystemd(self.paths, clock, garm)
        self.systemd.goal_state = {
            "units": {"garm/0": goal("active"), "garm/1": goal("active")},
            "relations": {},
        }
        self.router = router
        self.state: testing.State = testing.State()

    def run(self, event: Any, monkeypatch: pytest.MonkeyPatch) -> testing.State:
        monkeypatch.setattr(GarmCharm, "paths", self.paths)
        self.router.current = self.systemd
        self.state = self.ctx.run(event, self.state)
        return self.state

    @property
    def record(self) -> str | None:
        return self.peer().local_unit_data.get(fence.RECORD_KEY)

    def peer(self) -> testing.PeerRelation:
        relation = self.state.get_relation(PEER_ID)
        assert isinstance(relation, testing.PeerRelation)
        return relation

    @property
    def status(self) -> Any:  # ops.testing's status, which compares with ops' own
        return self.state.unit_status


class _Router:
    """``subprocess.run`` for whichever unit's hook runs."""

    def __init__(self) -> None:
        self.current: LeasedSystemd | None = None

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert self.current is not None
        return self.current(cmd, **kwargs)


def share(source: Unit, target: Unit) -> None:
    """Juju carries ``source``'s unit data (and its app data if it leads) to ``target``."""
    mine = source.peer()
    theirs = target.peer()
    peers = {**theirs.peers_data, source.number: dict(mine.local_unit_data)}
    app = mine.local_app_data if source.state.leader else theirs.local_app_data
    new = dataclasses.replace(theirs, peers_data=peers, local_app_data=app)
    relations = [new if r.id == PEER_ID else r for r in target.state.relations]
    target.state = dataclasses.replace(target.state, relations=relations)


@pytest.fixture
def units(
    tmp_path: Path,
    clock: FakeClock,
    world: GarmDouble,
    resources,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Unit, Unit]:
    """garm/0 leading and serving one scaleset on PostgreSQL; garm/1 standing by."""
    first, second = moved_to_postgresql(tmp_path, clock, world, resources, monkeypatch)
    database = first.state.get_relation(REL_ID)
    relation = configurator(SOLE_UNIT)
    first.state = dataclasses.replace(first.state, relations=[*first.state.relations, relation])
    first.run(first.ctx.on.relation_changed(relation, remote_unit=0), monkeypatch)
    assert first.systemd.running
    assert first.status == ops.ActiveStatus("1 scaleset in sync")
    assert first.record == str(LEASE)
    second.state = dataclasses.replace(
        second.state,
        relations=[*second.state.relations, database, relation],
        secrets=[*second.state.secrets, *first.state.secrets],
    )
    second.run(second.ctx.on.install(), monkeypatch)
    assert second.status == ops.ActiveStatus("Standing by: the leader unit runs GARM")
    assert second.record is None
    share(first, second)
    share(second, first)
    return first, second


def moved_to_postgresql(
    root: Path,
    clock: FakeClock,
    world: GarmDouble,
    resources: frozenset[testing.Resource],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Unit, Unit]:
    """garm/0 leading, its GARM on sqlite first (no lease: its data cannot be shared), then
    moved to PostgreSQL by the hook that brought the provider's answer; garm/1 not yet
    installed."""
    router = _Router()
    monkeypatch.setattr(subprocess, "run", router)
    monkeypatch.setattr(GarmCharm, "now", staticmethod(clock))
    monkeypatch.setattr(GarmCharm, "service_user", _me())
    monkeypatch.setattr("charmlibs.passwd.add_user", lambda name, **_: None)
    first = Unit(0, root, clock, router, world.process())
    second = Unit(1, root, clock, router, world.add_process("garm/1", start=False))
    for unit in (first, second):
        peer = testing.PeerRelation(PEERS, id=PEER_ID, peers_data={1 - unit.number: {}})
        config = {"api-port": unit.garm.port, "external-url": "http://garm.example:9997"}
        unit.state = make_state(world, resources, peer, leader=unit.number == 0, config=config)
    first.run(first.ctx.on.install(), monkeypatch)
    assert first.record is None and not first.paths.lease_file.exists()
    assert first.paths.sqlite_file.exists()  # GARM ran on sqlite here
    monkeypatch.setattr(GarmCharm, "paths", first.paths)
    router.current = first.systemd
    first.state, _ = relate_postgresql(first.ctx, first.state)
    assert first.record == str(LEASE)
    return first, second


def _me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def elect(new: Unit, old: Unit) -> None:
    """Juju moves the lease: ``new`` leads, ``old`` no longer does (told or not)."""
    new.state = dataclasses.replace(new.state, leader=True)
    old.state = dataclasses.replace(old.state, leader=False)


def ticks(
    leader: Unit,
    silent: Unit,
    span: timedelta,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    *,
    every: int = 30,
    world: GarmDouble | None = None,
) -> list[list[str]]:
    """The leader's timer ticks every ``every`` s for ``span`` (the last tick at its end),
    while systemd on the silent unit's machine checks its lease (and GARM's workers run,
    given the ``world``); never two GARMs meanwhile. Which GARMs ran, step by step."""
    end, seen = clock.now + span, []
    while clock.now < end:
        clock.advance(min(timedelta(seconds=every), end - clock.now))
        silent.systemd.check_lease()  # systemd on its machine, without the agent
        if world is not None:
            world.tick()
        leader.run(reconcile_tick(), monkeypatch)
        seen.append(running(silent, leader))
        assert len(seen[-1]) <= 1, f"two GARMs at {clock.now}"
    return seen


def serves_on_writing_nothing(
    leader: Unit, span: timedelta, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, world
) -> None:
    """For ``span``, the lease's checker runs between the leader's timer passes: GARM is
    never stopped by it, and nothing is written to GARM meanwhile."""
    writes = [r for r in world.requests if r.method != "GET"]
    end = clock.now + span
    while clock.now < end:
        for _ in range(timer_interval(leader) // timedelta(seconds=fence.CHECK_SECONDS)):
            clock.advance(timedelta(seconds=fence.CHECK_SECONDS))
            leader.systemd.check_lease()
            assert running(leader) == ["garm/0"], f"GARM stopped by its lease at {clock.now}"
        leader.run(reconcile_tick(), monkeypatch)
    assert [r for r in world.requests if r.method != "GET"] == writes


def running(*units: Unit) -> list[str]:
    return [u.name for u in units if u.systemd.running]


def test_a_new_leader_waits_until_the_old_one_says_its_garm_stopped(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    old, new = units
    elect(new, old)

    new.run(new.ctx.on.leader_elected(), monkeypatch)
    assert new.status.name == "waiting"
    assert new.status.message.startswith("Waiting for garm/0 to stop its GARM")
    assert running(old, new) == ["garm/0"]
    assert new.record == str(LEASE)  # told, to be committed when the hook ends

    clock.advance(timedelta(seconds=30))
    new.run(reconcile_tick(), monkeypatch)  # the timer goes on while it waits
    assert running(old, new) == ["garm/0"]
    assert new.paths.timer_file.exists()

    # The deposed unit's next hook stops its GARM and takes its record away ...
    old.run(leader_settings_changed(), monkeypatch)
    assert running(old, new) == []
    assert old.systemd.stopped_by == "charm"
    assert old.record is None
    assert not old.paths.lease_file.exists()
    share(old, new)
    # ... which Juju tells the new leader with a peer -changed: GARM starts there.
    new.run(new.ctx.on.relation_changed(new.peer(), remote_unit=0), monkeypatch)
    assert running(old, new) == ["garm/1"]
    assert new.status == ops.ActiveStatus("1 scaleset in sync")


def test_a_cut_off_leaders_garm_stops_by_its_lease_before_the_new_one_starts(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    old, new = units
    # garm/0's agent is cut off from the controller: no hook runs there any more.
    elect(new, old)
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    seen = ticks(new, old, FENCE + timedelta(seconds=30), clock, monkeypatch, every=10)
    assert ["garm/0"] in seen and ["garm/1"] in seen
    assert old.systemd.stopped_by == "lease"
    assert new.status == ops.ActiveStatus("1 scaleset in sync")


def test_a_leader_cut_off_in_the_hook_that_moved_garm_to_postgresql_blocks_no_new_leader(
    tmp_path: Path,
    clock: FakeClock,
    world: GarmDouble,
    resources: frozenset[testing.Resource],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, new = moved_to_postgresql(tmp_path, clock, world, resources, monkeypatch)
    # That hook's peer data is the last Juju has of garm/0: its agent is cut off now.
    assert old.paths.sqlite_file.exists()  # left behind: GARM's data is in PostgreSQL
    assert DATA_KEY not in old.peer().local_unit_data
    new.state = dataclasses.replace(
        new.state,
        relations=[*new.state.relations, old.state.get_relation(REL_ID)],
        secrets=[*new.state.secrets, *old.state.secrets],
    )
    new.run(new.ctx.on.install(), monkeypatch)
    share(old, new)
    share(new, old)
    elect(new, old)
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    ticks(new, old, FENCE + timedelta(seconds=30), clock, monkeypatch, every=10)
    assert running(old, new) == ["garm/1"], new.status
    assert new.status == ops.BlockedStatus(
        "Integrate with garm-configurator: juju integrate garm garm-configurator"
    )


def test_the_new_leader_waits_out_the_whole_lease_of_a_silent_unit(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    old, new = units
    elect(new, old)
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    ticks(new, old, FENCE - timedelta(seconds=1), clock, monkeypatch)
    assert running(new) == []
    assert (
        new.status.message == "Waiting for garm/0 to stop its GARM (its lease ends in 1s at most)"
    )
    clock.advance(timedelta(seconds=1))
    new.run(reconcile_tick(), monkeypatch)
    assert running(new) == ["garm/1"]


def test_a_unit_that_cannot_tell_whether_it_leads_stops_its_garm(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _ = units

    def fails(_: object) -> bool:
        raise ops.ModelError("ERROR connection is shut down")

    # The hook tool itself fails (the agent cannot reach the controller): ops.testing's
    # stand-in for the hook tools answers is-leader with the error.
    # ops asks it again to evaluate the unit's status, so the hook fails after the pass:
    # the record's removal is not committed, but GARM is stopped and its lease is gone.
    monkeypatch.setattr(scenario.mocking._MockModelBackend, "is_leader", fails)
    with pytest.raises(UncaughtCharmError, match="connection is shut down"):
        old.run(reconcile_tick(), monkeypatch)
    assert running(old) == []
    assert not old.paths.lease_file.exists()


def test_a_deposed_leaders_garm_cannot_start_again_once_its_lease_lapsed(
    units: tuple[Unit, Unit], clock: FakeClock
) -> None:
    old, _ = units
    # systemd's Restart= (or a reboot) would start GARM again: its ExecStartPre refuses.
    clock.advance(timedelta(seconds=LEASE + fence.CHECK_SECONDS))
    old.systemd.check_lease()
    assert old.systemd.stopped_by == "lease"
    with pytest.raises(subprocess.CalledProcessError):
        old.systemd(["systemctl", "restart", "garm"], check=True)
    assert running(old) == []
    # Restart= tries again, each try refused, and gives up after a bounded number of
    # them rather than every 5 s for ever.
    tried = len(old.systemd.starts)
    clock.advance(timedelta(hours=1))
    old.systemd.play()
    assert old.systemd.failed and running(old) == []
    assert len(old.systemd.starts) - tried <= START_LIMIT_BURST


def test_a_leader_whose_garm_systemd_gave_up_on_starts_it_once_its_lease_holds(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    leader, _ = units
    # The leader's agent hangs past its lease, and its GARM exits meanwhile: Restart=
    # tries to start it again, the lease check refuses each try, and systemd gives up.
    clock.advance(timedelta(seconds=LEASE + 1))
    leader.systemd.fail("fatal error: runtime: out of memory")
    leader.systemd.refusal = None  # the next start of GARM itself would go
    clock.advance(timedelta(seconds=60))
    leader.systemd.play()
    assert leader.systemd.failed and running(leader) == []
    own = [line for _, whose, line in leader.systemd.journal if whose == "garm.service"]
    assert own[-1] == "GARM's lease has lapsed: GARM may not start here"

    # The agent is back: the pass renews the lease and starts GARM, within the window
    # in which systemd itself refuses to.
    leader.run(reconcile_tick(), monkeypatch)
    assert ["reset-failed", "garm"] in leader.systemd.calls
    assert running(leader) == ["garm/0"]
    assert leader.status == ops.ActiveStatus("1 scaleset in sync")


def test_a_leader_whose_own_lease_lapsed_waits_anew_for_a_silent_unit(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    old, new = units
    elect(new, old)
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    ticks(new, old, FENCE, clock, monkeypatch)
    assert running(old, new) == ["garm/1"]
    # garm/1 then runs no pass for longer than its lease (a gap in its leadership it
    # cannot see): the stamp it waited from is no proof any more.
    clock.advance(timedelta(seconds=LEASE + fence.CHECK_SECONDS))
    new.systemd.check_lease()
    assert running(new) == []
    new.run(reconcile_tick(), monkeypatch)
    assert new.status.message.startswith("Waiting for garm/0 to stop its GARM")
    assert running(new) == []


def test_an_upgraded_leader_keeps_the_garm_it_runs_while_it_tells_the_others(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _ = units
    # As a revision before the fence left it: GARM running, no record.
    peer = dataclasses.replace(old.peer(), local_unit_data={})
    relations = [peer if r.id == PEER_ID else r for r in old.state.relations]
    old.state = dataclasses.replace(old.state, relations=relations)
    old.systemd.calls.clear()
    old.run(old.ctx.on.upgrade_charm(), monkeypatch)
    assert ["stop", "garm"] not in old.systemd.calls
    assert running(old) == ["garm/0"]
    assert old.record == str(LEASE)
    assert old.status == ops.ActiveStatus("1 scaleset in sync")


def busy_runner(world: GarmDouble, garm) -> str:
    """A runner ``garm`` (a GARM process) creates and GitHub gives a job at once."""
    (scaleset,) = world.scalesets()
    return world.add_runner(scaleset["id"], runner_status="active", process=garm.name)


def test_without_the_fence_the_second_garm_kills_a_busy_runner_of_the_first(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock, world
) -> None:
    """What the fence is for: without it, the second GARM kills the first one's busy runner."""
    old, new = units
    monkeypatch.setattr(fence, "decide", lambda *a, **k: fence.Fence(True, LEASE))
    elect(new, old)
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    assert running(old, new) == ["garm/0", "garm/1"]
    job = busy_runner(world, old.garm)  # the deposed GARM still scales its scaleset
    clock.advance(CONSOLIDATION_INTERVAL)
    world.tick()
    assert [lost[0] for lost in world.lost_jobs] == [job]


def test_with_the_fence_no_runner_is_lost_across_a_failover_from_a_cut_off_leader(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock, world
) -> None:
    old, new = units
    elect(new, old)
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    job = busy_runner(world, old.garm)  # made by the cut-off leader's GARM meanwhile
    ticks(new, old, FENCE + CONSOLIDATION_INTERVAL * 2, clock, monkeypatch, world=world)
    assert running(old, new) == ["garm/1"]
    assert world.lost_jobs == []
    assert job in new.garm.runners()  # loaded from the database when it started


def test_the_wait_for_a_silent_unit_ends_at_the_pass_it_asks_for(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    """The wait's end is a moment: the leader asks for a pass then (``garm.requeue``),
    rather than starting GARM at whichever periodic tick comes after it."""
    old, new = units
    elect(new, old)
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    end = clock.now + FENCE
    assert new.systemd.requeue_due == end
    # The periodic timer ticks meanwhile (every 30 s, its last 10 s before the end) ...
    ticks(new, old, FENCE - timedelta(seconds=10), clock, monkeypatch)
    assert running(old, new) == []
    assert new.systemd.requeue_due == end  # ... each pass asking for the same moment

    clock.advance(end - clock.now)
    old.systemd.check_lease()
    assert new.systemd.fire_requeue()
    new.run(reconcile_tick(), monkeypatch)

    assert running(old, new) == ["garm/1"]
    assert new.status == ops.ActiveStatus("1 scaleset in sync")


# --- the lease and the timer: one decides the other -----------------------------------


def timer_interval(unit: Unit) -> timedelta:
    """How far apart the unit's reconcile timer runs passes, as its installed unit says."""
    text = unit.paths.timer_file.read_text()
    (seconds,) = re.findall(r"^OnUnitInactiveSec=(\d+)s$", text, re.MULTILINE)
    return timedelta(seconds=int(seconds))


@pytest.mark.parametrize("interval", [600, 0])
def test_raising_the_interval_never_lets_the_healthy_leaders_lease_lapse(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock, interval: int
) -> None:
    """The hook that raises ``reconcile-interval`` still holds the old lease (the other
    units know no longer one yet): its next pass comes at that lease's pace, and takes the
    longer lease once its record is committed. Only the timer's and the requeue's passes
    run; systemd checks the lease every 10 s."""
    leader, _ = units
    config = {**leader.state.config, "reconcile-interval": interval}
    leader.state = dataclasses.replace(leader.state, config=config)
    leader.run(leader.ctx.on.config_changed(), monkeypatch)
    end, passes = clock.now + timedelta(minutes=45), 0
    while clock.now < end:
        due = clock.now + timer_interval(leader)
        if leader.systemd.requeue_due is not None:
            due = min(due, leader.systemd.requeue_due)
        while clock.now < due:
            clock.advance(min(timedelta(seconds=fence.CHECK_SECONDS), due - clock.now))
            leader.systemd.check_lease()
            assert running(leader) == ["garm/0"], f"GARM stopped by its lease at {clock.now}"
        leader.systemd.fire_requeue()
        leader.run(reconcile_tick(), monkeypatch)
        passes += 1
    assert leader.status == ops.ActiveStatus("1 scaleset in sync")
    assert leader.record == str(fence.lease_seconds(interval))
    # The timer settles at the pace asked for: a few passes, not one every 30 s.
    assert timer_interval(leader) == timedelta(seconds=interval or fence.PACE_WITHOUT_TIMER)
    assert passes <= 45 * 60 // (interval or fence.PACE_WITHOUT_TIMER) + 2


# --- the fence relies on its timer running, and on knowing who else may run GARM ---------


def test_a_lease_checker_stopped_out_of_band_is_started_again_by_the_next_pass(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    old, new = units
    old.systemd.started.discard(lease.TIMER)  # systemctl stop garm-lease.timer, by hand
    clock.advance(timedelta(seconds=30))
    old.run(reconcile_tick(), monkeypatch)
    assert lease.TIMER in old.systemd.started

    # Cut off later, its GARM stops by its lease before the new leader's starts.
    elect(new, old)
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    seen = ticks(new, old, FENCE + timedelta(seconds=30), clock, monkeypatch, every=10)
    assert ["garm/0"] in seen and ["garm/1"] in seen
    assert old.systemd.stopped_by == "lease"


def test_a_leader_that_can_read_neither_its_peers_nor_goal_state_starts_no_garm(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    """garm/1 is elected before its peer relation is there for it, and goal-state fails:
    it cannot tell whether garm/0 runs GARM on the database, so it does not start one."""
    old, new = units
    elect(new, old)
    relations = [r for r in new.state.relations if r.id != PEER_ID]
    new.state = dataclasses.replace(new.state, relations=relations)
    new.systemd.goal_state = None
    new.run(new.ctx.on.leader_elected(), monkeypatch)
    assert running(old, new) == ["garm/0"]
    assert new.status.name == "waiting"
    assert new.status.message.startswith("Waiting for goal-state to list this application's")

    clock.advance(timedelta(seconds=30))
    new.run(reconcile_tick(), monkeypatch)  # still not knowing: still waiting
    assert running(old, new) == ["garm/0"]


def test_a_dying_leader_serves_on_with_its_lease_renewed_until_its_stop_hook(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock, world
) -> None:
    """Juju keeps a dying unit the leader until it is dead; a teardown hook that fails
    (here: nothing comes after the first) holds it there. Its timer goes on renewing the
    lease, and its GARM, the only one there can be meanwhile, keeps serving."""
    leader, _ = units
    leader.systemd.goal_state = {
        "units": {"garm/0": goal("dying"), "garm/1": goal("active")},
        "relations": {},
    }
    leader.run(reconcile_tick(), monkeypatch)
    assert leader.status == ops.MaintenanceStatus(BEING_REMOVED)
    assert leader.paths.timer_file.exists()
    serves_on_writing_nothing(leader, timedelta(minutes=30), clock, monkeypatch, world)

    # Its stop hook stops GARM and takes the timer and the record away.
    leader.run(leader.ctx.on.stop(), monkeypatch)
    assert running(leader) == [] and not leader.paths.timer_file.exists()
    assert leader.record is None


def test_a_dying_leader_whose_peers_departed_from_its_view_still_serves_on(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    """Teardown runs the peer relation's -departed on the dying leader: garm/1, alive in
    goal-state, is no longer in its view. No wait opens for it: Juju lets no other unit
    lead meanwhile, and the dying leader's GARM is the only one there can be."""
    leader, _ = units
    leader.systemd.goal_state = {
        "units": {"garm/0": goal("dying"), "garm/1": goal("active")},
        "relations": {},
    }
    peer = dataclasses.replace(leader.peer(), peers_data={})
    relations = [peer if r.id == PEER_ID else r for r in leader.state.relations]
    leader.state = dataclasses.replace(leader.state, relations=relations)
    leader.run(leader.ctx.on.relation_departed(peer, remote_unit=1), monkeypatch)
    end = clock.now + timedelta(minutes=15)
    while clock.now < end:
        clock.advance(timedelta(seconds=fence.CHECK_SECONDS))
        leader.systemd.check_lease()
        assert running(leader) == ["garm/0"], f"GARM stopped at {clock.now}"
        if leader.paths.timer_file.exists() and clock.now.second % 30 == 0:
            leader.run(reconcile_tick(), monkeypatch)
    assert leader.status == ops.MaintenanceStatus(BEING_REMOVED)
    assert garm_port_open(leader)


def garm_port_open(unit: Unit) -> bool:
    return any(p.port == unit.garm.port for p in unit.state.opened_ports)


def test_lowering_the_interval_on_a_pass_that_stops_early_paces_the_timer_to_its_lease(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock, tmp_path: Path
) -> None:
    """The lease is renewed at every pass, however it ends; so is the timer's pace. Here
    the interval is lowered from 600 to 30 in a pass a missing resource stops: the lease
    taken is the short one, and the timer must come within it."""
    leader, _ = units
    for interval in (600, 600):
        config = {**leader.state.config, "reconcile-interval": interval}
        leader.state = dataclasses.replace(leader.state, config=config)
        leader.run(reconcile_tick(), monkeypatch)
    assert timer_interval(leader) == timedelta(seconds=600)
    config = {**leader.state.config, "reconcile-interval": 30}
    empty = tmp_path / "garm.tgz"
    empty.write_bytes(b"")  # attached empty: as good as not attached
    resources = {r for r in leader.state.resources if r.name != "garm"}
    resources.add(testing.Resource(name="garm", path=empty))
    leader.state = dataclasses.replace(leader.state, config=config, resources=frozenset(resources))
    leader.run(leader.ctx.on.config_changed(), monkeypatch)
    assert leader.status.name == "blocked"
    end = clock.now + timedelta(minutes=15)
    while clock.now < end:
        due = clock.now + timer_interval(leader)
        while clock.now < due:
            clock.advance(timedelta(seconds=fence.CHECK_SECONDS))
            leader.systemd.check_lease()
            assert running(leader) == ["garm/0"], f"GARM stopped by its lease at {clock.now}"
        leader.run(reconcile_tick(), monkeypatch)


def test_a_paused_leader_writes_nothing_and_its_garm_serves_on_with_its_lease_renewed(
    units: tuple[Unit, Unit], monkeypatch: pytest.MonkeyPatch, clock: FakeClock, world
) -> None:
    """``paused`` holds the charm, not GARM (ADR 0014): the timer goes on renewing the
    lease, so GARM keeps serving for as long as the pause lasts, and nothing is written."""
    leader, _ = units
    config = {**leader.state.config, "paused": True}
    leader.state = dataclasses.replace(leader.state, config=config)
    leader.run(leader.ctx.on.config_changed(), monkeypatch)
    assert leader.status.name == "maintenance" and "Paused since" in leader.status.message
    serves_on_writing_nothing(leader, timedelta(minutes=30), clock, monkeypatch, world)
