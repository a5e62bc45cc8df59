"""Juju's lifecycle through the real charm: hook sequences as Juju runs them.

Each test replays one sequence of ``docs/explanation/juju-lifecycle.md`` (a dying
leader, a relation whose units have not joined, a suspended relation, a multi-unit
configurator and its leader change, a foreign provider, one GARM per sqlite) with
goal-state answered as the controller would, against the GARM double over HTTP.
"""

from __future__ import annotations

import dataclasses
import tomllib

import ops
import pytest
from ops import testing

from charm import GarmCharm
from garm import workload
from garm.identity import KEY as IDENTITY_KEY
from juju.lifecycle import SQLITE_MULTI_UNIT
from juju.peers import DATA_KEY, PEERS
from juju.peers import HOME_KEY as SQLITE_HOME_KEY
from leader import BEING_REMOVED
from scalesets.planner import YOUNGEST_DELETE
from tests.charm_states import (
    configurator,
    in_full,
    live_names,
    make_state,
    providers_in_config,
    relate_postgresql,
    tags,
)
from tests.databags import EXAMPLE_UNIT, SOLE_UNIT, follower
from tests.garm_double import CONSOLIDATION_INTERVAL
from tests.juju_events import leader_settings_changed, reconcile_tick, self_departing
from tests.machine import APP, Machine, goal, goal_state

pytestmark = pytest.mark.usefixtures("machine")


def warm_handover(old: str) -> list[str]:
    """What timer passes 30 s apart show while lg-x64 (min-idle 1) is replaced."""
    return [
        f"Replacing scaleset lg-x64 ({old}): handing over",  # its runner is being created
        f"Replacing scaleset lg-x64 ({old}): handing over",  # booted, not yet reported
        f"Replacing scaleset lg-x64 ({old}): draining 1 runner",  # idle: the old one retires
        f"Replacing scaleset lg-x64 ({old}): draining 1 runner",  # GARM scales it down
        "1 scaleset in sync",
    ]


def phase_a(unit: int, data: dict[str, str]) -> dict[str, str]:
    """What configurator follower ``unit`` publishes."""
    return follower(f"{APP}/{unit}", data)


def phase_b(unit: int, data: dict[str, str]) -> dict[str, str]:
    """What a configurator leader publishes: everything, under its own provider."""
    return {**data, "provider_name": f"{APP}-{unit}"}


def with_units(state: testing.State, relation: testing.Relation, units: dict[int, dict]):
    new = dataclasses.replace(relation, remote_units_data=units)
    others = [r for r in state.relations if r.id != relation.id]
    return dataclasses.replace(state, relations=[*others, new]), new


def served(world) -> set[str]:
    return {t["name"] for s in world.scalesets() if s.get("enabled") for t in s.get("tags", [])}


# --- a dying leader ------------------------------------------------------------------


def test_removing_the_leader_unit_deletes_nothing_and_cleans_the_machine(
    ctx, world, resources, machine: Machine
):
    second = {**SOLE_UNIT, "provider_name": f"{APP}-1"}
    relation = configurator(EXAMPLE_UNIT, second)
    machine.systemctl.goal_state = goal_state(f"{APP}/0", f"{APP}/1")
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1), make_state(world, resources, relation)
    )
    assert len(world.scalesets()) == 2
    writes = len(world.writes())

    # juju remove-unit garm/0: still leader, one -departed per remote unit naming itself,
    # each seeing one unit fewer, then -broken, stop, remove
    # (docs/explanation/juju-lifecycle.md §2).
    # goal-state is left saying "active" so that the hook alone must be enough.
    with self_departing("garm/0"):
        state, relation = with_units(state, relation, {1: second})
        state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0), state)
        assert state.unit_status == ops.MaintenanceStatus(BEING_REMOVED)
        state, relation = with_units(state, relation, {})
        state = ctx.run(ctx.on.relation_departed(relation, remote_unit=1), state)
    relation = state.get_relation(relation.id)  # as the last hook left it (app data)
    state = ctx.run(ctx.on.relation_broken(relation), state)
    assert state.unit_status == ops.MaintenanceStatus(BEING_REMOVED)
    assert world.writes()[writes:] == []
    assert all(s["enabled"] for s in world.scalesets())

    machine.systemctl.calls.clear()
    state = ctx.run(ctx.on.stop(), state)
    assert ["stop", "garm"] in machine.systemctl.calls
    ctx.run(ctx.on.remove(), state)
    paths = machine.paths
    assert not paths.config_dir.exists() and not paths.data_dir.exists()
    assert not paths.binary.exists() and not paths.unit_file.exists()
    assert not paths.staging.exists()  # the checked resources, too
    assert world.writes()[writes:] == []


def test_a_unit_goal_state_lists_as_dying_changes_nothing(ctx, world, resources, machine):
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    (serving,) = world.scalesets()
    machine.systemctl.goal_state = goal_state(status="dying")  # and its view empties
    state, relation = with_units(state, relation, {})
    relation = state.get_relation(relation.id)  # as the last hook left it (app data)
    state = ctx.run(ctx.on.relation_broken(relation), state)
    assert state.unit_status == ops.MaintenanceStatus(BEING_REMOVED)
    assert world.scalesets() == [serving]
    with pytest.raises(testing.ActionFailed, match=BEING_REMOVED):
        ctx.run(ctx.on.action("reconcile"), state)  # actions still run on a dying unit
    assert world.scalesets() == [serving]


# --- a view that is not whole ----------------------------------------------------------


def test_a_relation_whose_units_have_not_joined_here_retires_nothing(
    ctx, world, resources, machine
):
    # A new leader (shared PostgreSQL) before the -joined hooks: GARM already serves.
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    (serving,) = world.scalesets()
    writes = len(world.writes())

    empty = dataclasses.replace(relation, remote_units_data={})
    state = ctx.run(ctx.on.leader_elected(), make_state(world, resources, empty))
    assert state.unit_status == ops.WaitingStatus(
        f"Waiting for {APP}/0 to join: nothing it may serve is retired until then"
    )
    empty = state.get_relation(empty.id)  # as the last hook left it (app data)
    state = ctx.run(ctx.on.relation_created(empty), state)
    assert world.writes()[writes:] == []
    assert world.scalesets() == [serving]

    state, joined = with_units(state, empty, {0: SOLE_UNIT})
    state = ctx.run(ctx.on.relation_joined(joined, remote_unit=0), state)
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert world.writes()[writes:] == []


def test_a_relation_with_no_units_it_never_saw_leave_is_not_read_as_empty(
    ctx, world, resources, machine
):
    # A cross-model relation whose units are not in scope: goal-state keys the remote
    # application by its offer URL and lists none of its units.
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    offer = {"admin/ci.garm-configurator": goal("joined")}
    machine.systemctl.goal_state = {"units": {"garm/0": goal("active")}, "relations": {APP: offer}}
    empty = dataclasses.replace(relation, remote_units_data={})
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, empty))
    assert state.unit_status == ops.WaitingStatus(
        f"Waiting for a unit of {APP} to join: nothing it may serve is retired until then"
    )
    assert all(s["enabled"] for s in world.scalesets())


def test_the_last_unit_departing_is_intent_and_its_scaleset_goes(
    ctx, world, resources, machine, later
):
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    later()  # the unit leaves some time after its scaleset was created
    machine.systemctl.goal_state = goal_state(dying=(f"{APP}/0",))
    state, relation = with_units(state, relation, {})
    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    assert world.scalesets() == []  # nothing asks for its labels: retired and deleted
    machine.systemctl.goal_state = goal_state()
    state = ctx.run(ctx.on.update_status(), state)  # remembered: still a deliberate zero
    assert state.unit_status == ops.ActiveStatus("0 scalesets in sync")


def test_a_suspended_cross_model_relation_removes_nothing(ctx, world, resources, machine):
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    (serving,) = world.scalesets()
    # juju suspend-relation on a cross-model relation: -departed per unit while Juju says
    # "suspending" (it says "suspended" only after -broken), then -broken; the relation
    # stays. goal-state keys a cross-model application by its offer URL, without units.
    offer = "admin/ci.garm-configurator"

    def suspension(status: str):
        return {"units": {"garm/0": goal("active")}, "relations": {APP: {offer: goal(status)}}}

    machine.systemctl.goal_state = suspension("suspending")
    state, relation = with_units(state, relation, {})
    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    relation = state.get_relation(relation.id)  # as the last hook left it (app data)
    state = ctx.run(ctx.on.relation_broken(relation), state)
    machine.systemctl.goal_state = suspension("suspended")
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, relations=[]))
    assert world.scalesets() == [serving]
    assert state.unit_status == ops.WaitingStatus(
        f"Waiting for the suspended relation with {offer} to resume: "
        "nothing it may serve is retired until then"
    )


def test_removing_the_relation_on_a_live_unit_removes_its_scalesets(
    ctx, world, resources, machine, later
):
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    later()  # the relation is removed some time after its scaleset was created
    state, relation = with_units(state, relation, {})
    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    machine.systemctl.goal_state = goal_state()
    relation = state.get_relation(relation.id)  # as the last hook left it (app data)
    state = ctx.run(ctx.on.relation_broken(relation), state)
    assert world.scalesets() == []


# --- a multi-unit configurator -------------------------------------------------------------


def test_a_three_unit_configurator_converges_and_changes_labels(
    ctx, world, resources, machine, later
):
    units = {0: phase_a(0, EXAMPLE_UNIT), 1: phase_b(1, EXAMPLE_UNIT), 2: phase_a(2, EXAMPLE_UNIT)}
    relation = configurator(*units.values())
    world.reset()  # GARM has the providers the charm configured: only the leader's
    world.add_provider(f"{APP}-1")
    world.add_org("example-org")
    machine.systemctl.goal_state = goal_state(*(f"{APP}/{n}" for n in units))
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=1), make_state(world, resources, relation)
    )
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")
    assert providers_in_config(machine) == [f"{APP}-1"]
    (first,) = world.scalesets()
    assert first["provider_name"] == f"{APP}-1"

    for _ in range(3):
        later()  # its warm runner (min-idle 1) boots and reports

    relabelled = {"labels": "self-hosted,linux,arm64"}
    for n in units:
        units[n] = {**units[n], **relabelled}
        state, relation = with_units(state, relation, dict(units))
        state = ctx.run(ctx.on.relation_changed(relation, remote_unit=n), state)
    # Only the leader's provider is in GARM, so its change (unit 1) makes the new
    # generation; the old one serves until the new one listens and has its warm runner.
    handover = f"Replacing scaleset lg-x64 ({first['name']}): handing over"
    assert state.unit_status == ops.ActiveStatus(handover)
    assert len(world.scalesets()) == 2 and all(s["enabled"] for s in world.scalesets())

    seen = []
    for _ in range(5):
        later()
        state = ctx.run(reconcile_tick(), state)
        seen.append(state.unit_status.message)
    assert seen == warm_handover(first["name"])
    assert tags(world) == [["arm64", "lg-x64", "linux", "self-hosted"]]


def test_a_configurator_leader_change_never_strands_the_scaleset(
    ctx, world, resources, machine, later
):
    units = {0: phase_b(0, EXAMPLE_UNIT), 1: phase_a(1, EXAMPLE_UNIT)}
    relation = configurator(*units.values())
    machine.systemctl.goal_state = goal_state(f"{APP}/0", f"{APP}/1")
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    (old,) = live_names(world)
    for _ in range(3):
        later()  # it serves: its warm runner (min-idle 1) boots and reports
    world.add_provider(f"{APP}-1")  # GARM restarted with the new leader's provider

    # The new leader publishes Phase B; the old one keeps its stale keys: nothing moves.
    units[1] = phase_b(1, EXAMPLE_UNIT)
    state, relation = with_units(state, relation, dict(units))
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=1), state)
    assert live_names(world) == [old]
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")

    # The old leader leaves: its scaleset hands over to one under the new provider, which
    # takes over once it listens and has its warm runner; no label is left unserved.
    machine.systemctl.goal_state = goal_state(f"{APP}/1", dying=(f"{APP}/0",))
    state, relation = with_units(state, relation, {1: units[1]})
    labels = served(world)
    state = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)
    assert labels <= served(world)
    assert state.unit_status == ops.ActiveStatus(
        f"Replacing scaleset lg-x64 ({old}): handing over"
    )
    seen = []
    for _ in range(5):
        later()
        state = ctx.run(reconcile_tick(), state)
        assert labels <= served(world)
        seen.append(state.unit_status.message)
    assert seen == warm_handover(old)
    (new,) = world.scalesets()
    assert new["provider_name"] == f"{APP}-1" and new["enabled"]


def test_a_unit_cannot_rewrite_another_units_provider(ctx, world, resources, machine):
    relation = configurator(EXAMPLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    clouds = machine.paths.config_dir / "providers" / f"{APP}-0-clouds.yaml"
    before = clouds.read_text()
    intruder = {**EXAMPLE_UNIT, "name": "other", "openstack_project_name": "foreign"}
    machine.systemctl.goal_state = goal_state(f"{APP}/0", f"{APP}/1")
    state, relation = with_units(state, relation, {0: EXAMPLE_UNIT, 1: intruder})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=1), state)
    assert clouds.read_text() == before
    assert providers_in_config(machine) == [f"{APP}-0"]
    assert in_full(ctx, state) == ops.BlockedStatus(
        f"Fix {APP}/1: invalid provider_name: '{APP}-0' is not this unit's own provider "
        f"('{APP}-1'); a unit may only define its own"
    )


# --- one GARM at a time ----------------------------------------------------------------------


def peers(home: str | None = None, *others: int, data_on: int | None = None):
    """The peer relation: the recorded home, the other garm units and their own records."""
    return testing.PeerRelation(
        PEERS,
        local_app_data={SQLITE_HOME_KEY: home} if home else {},
        peers_data={n: {DATA_KEY: "true"} if n == data_on else {} for n in others},
    )


def garm_units(machine: Machine, *numbers: int) -> None:
    """Juju's goal-state: this application's units (garm/0 is this one)."""
    machine.systemctl.goal_state = {
        "units": {f"garm/{n}": goal("active") for n in (0, *numbers)},
        "relations": {},
    }


def test_the_first_sqlite_leader_records_itself_as_the_datas_home(ctx, world, resources):
    relation = peers()
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))
    written = state.get_relation(relation.id)
    assert isinstance(written, testing.PeerRelation)
    # With the GARM it set up (garm.identity), which names this unit's sqlite too.
    assert written.local_app_data.keys() == {SQLITE_HOME_KEY, IDENTITY_KEY}
    assert written.local_app_data[SQLITE_HOME_KEY] == "garm/0"
    assert written.local_unit_data[DATA_KEY] == "true"  # GARM made its sqlite file here


def test_a_unit_whose_machine_holds_the_sqlite_file_says_so(ctx, world, resources, machine):
    relation = peers("garm/0", 1)
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation))  # on sqlite
    machine.paths.sqlite_file.write_bytes(b"SQLite format 3\x00")  # as GARM would
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, leader=False))
    written = state.get_relation(relation.id)
    assert isinstance(written, testing.PeerRelation)
    assert written.local_unit_data[DATA_KEY] == "true"


def test_two_units_on_sqlite_are_refused_and_the_leader_keeps_serving(
    ctx, world, resources, machine
):
    relation = configurator(SOLE_UNIT)
    garm_units(machine, 1)
    state = ctx.run(
        ctx.on.update_status(), make_state(world, resources, relation, peers("garm/0", 1))
    )
    assert state.unit_status == ops.BlockedStatus(f"Fix garm/0: {SQLITE_MULTI_UNIT}")
    assert machine.paths.unit_file.exists() and len(world.scalesets()) == 1
    follower = make_state(world, resources, relation, peers("garm/0", 1), leader=False)
    assert ctx.run(ctx.on.update_status(), follower).unit_status == ops.BlockedStatus(
        SQLITE_MULTI_UNIT
    )


def test_a_new_sqlite_leader_never_starts_an_empty_garm(ctx, world, resources, machine):
    relation = configurator(SOLE_UNIT)
    garm_units(machine, 1)
    state = make_state(world, resources, relation, peers("garm/1", 1))
    state = ctx.run(ctx.on.leader_elected(), state)
    assert state.unit_status == ops.BlockedStatus(
        "GARM's sqlite data is on garm/1: scale to one unit so that it leads"
    )
    assert world.requests == [] and not machine.paths.unit_file.exists()

    # garm/1 is gone for good: the operator cleaned GitHub and says so.
    garm_units(machine)
    state = make_state(world, resources, relation, peers("garm/1"))
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status.message.startswith("GARM's sqlite data left with garm/1")
    state = ctx.run(ctx.on.action("start-empty-garm"), state)
    assert ctx.action_results is not None
    assert (ctx.action_results["previous-home"], ctx.action_results["home"]) == (
        "garm/1",
        "garm/0",
    )
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == ops.ActiveStatus("1 scaleset in sync")


def test_a_leader_elected_before_the_home_was_recorded_finds_the_datas_unit(
    ctx, world, resources, machine
):
    # Upgraded from a revision without the record: garm/1 says it has the file.
    garm_units(machine, 1)
    state = make_state(world, resources, configurator(SOLE_UNIT), peers(None, 1, data_on=1))
    state = ctx.run(ctx.on.leader_elected(), state)
    assert state.unit_status == ops.BlockedStatus(
        "GARM's sqlite data is on garm/1: scale to one unit so that it leads"
    )
    assert world.requests == []


def test_start_empty_garm_is_refused_while_the_data_unit_is_there(ctx, world, resources, machine):
    garm_units(machine, 1)
    state = make_state(world, resources, peers("garm/1"))  # not seen joined here, yet alive
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("start-empty-garm"), state)
    assert failed.value.message == "garm/1 still holds GARM's data: scale to one unit instead"


def test_a_demoted_leader_stops_its_garm_on_leader_settings_changed(
    ctx, world, resources, machine
):
    state = ctx.run(ctx.on.install(), make_state(world, resources, configurator(SOLE_UNIT)))
    machine.systemctl.calls.clear()
    state = ctx.run(leader_settings_changed(), dataclasses.replace(state, leader=False))
    assert ["stop", "garm"] in machine.systemctl.calls
    assert state.unit_status == ops.ActiveStatus("Standing by: the leader unit runs GARM")


def test_a_failed_create_during_a_rename_leaves_every_label_served(
    ctx, world, resources, machine, later
):
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    labels = served(world)
    later()
    world.inject("POST", r"/organizations/[^/]+/scalesets/?", status=500, times=10)
    state, relation = with_units(state, relation, {0: {**SOLE_UNIT, "name": "sm-new"}})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert labels - {"sm-x64"} <= served(world)
    assert state.unit_status.name == "waiting"
    (old,) = live_names(world)
    world.clear_faults()

    # The timer's next pass creates it; the old scaleset serves until the new one
    # listens, then is retired and (no runner, old enough) deleted in the same pass.
    seen = []
    for _ in range(2):
        later()
        state = ctx.run(reconcile_tick(), state)
        assert labels - {"sm-x64"} <= served(world)
        seen.append(state.unit_status.message)
    assert seen == [f"Removing scaleset sm-x64 ({old}): handing over", "1 scaleset in sync"]
    assert tags(world) == [["linux", "self-hosted", "sm-new", "x64"]]


def test_a_leader_change_on_postgresql_resumes_the_changeover_without_a_create(
    ctx, world, resources, machine: Machine, monkeypatch, tmp_path, later
):
    # garm/0 leads on PostgreSQL (the double is the shared database's GARM) and starts a
    # label change while a job runs on the old generation.
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    first = ctx.run(ctx.on.install(), make_state(world, resources))
    first, database = relate_postgresql(ctx, first)
    relation = configurator(SOLE_UNIT)
    first = dataclasses.replace(first, relations=[*first.relations, relation])
    first = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), first)
    (old,) = world.scalesets()
    job = world.add_runner(old["id"], runner_status="active")
    later()
    first, relation = with_units(first, relation, {0: {**SOLE_UNIT, "labels": "linux,arm64"}})
    first = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), first)
    # The replacement's listener is not up yet: the old generation keeps the jobs.
    replacing = f"Replacing scaleset sm-x64 ({old['name']})"
    assert first.unit_status == ops.ActiveStatus(f"{replacing}: handing over")
    later()
    first = ctx.run(reconcile_tick(), first)
    assert first.unit_status == ops.ActiveStatus(f"{replacing}: draining 1 runner")
    creates = [w for w in world.writes() if w.method == "POST"]

    # Leadership moves: the old leader is told, and stops its GARM ...
    machine.systemctl.calls.clear()
    ctx.run(leader_settings_changed(), dataclasses.replace(first, leader=False))
    assert ["stop", "garm"] in machine.systemctl.calls
    # ... and garm/1, on its own machine with the same database, takes over.
    monkeypatch.setattr(GarmCharm, "paths", workload.Paths(tmp_path / "garm-1"))
    other = testing.Context(GarmCharm, app_name="garm", unit_id=1)
    # garm/0 is in garm/1's peer relation, its GARM stopped (no garm-running record).
    peer = testing.PeerRelation(PEERS, id=42, peers_data={0: {}})
    second = make_state(world, resources, relation, database, peer, leader=True)
    second = dataclasses.replace(second, secrets=[*second.secrets, *first.secrets])
    second = other.run(other.on.leader_elected(), second)
    # It tells the others first (juju.fence), and starts GARM at its next pass.
    assert second.unit_status == ops.WaitingStatus(
        "Telling the other units GARM starts here; it starts at the next pass"
    )
    second = other.run(reconcile_tick(), second)
    assert backend_of(GarmCharm.paths) == "postgresql"
    assert second.unit_status == ops.ActiveStatus(f"{replacing}: draining 1 runner")

    # Retired, the old scaleset has no listener: GARM hears of the job's end at its next
    # consolidation with GitHub, and the new leader's timer deletes the empty scaleset.
    world.finish_job(job)
    seen = []
    for step in (CONSOLIDATION_INTERVAL, YOUNGEST_DELETE, YOUNGEST_DELETE):
        later(step)
        second = other.run(reconcile_tick(), second)
        seen.append(second.unit_status.message)
    assert seen == [
        f"{replacing}: draining 1 runner",  # consolidated: pending_delete
        "1 scaleset in sync",  # reaped: the scaleset is deleted
        "1 scaleset in sync",
    ]
    assert [w for w in world.writes() if w.method == "POST"] == creates  # no create again
    assert tags(world) == [["arm64", "linux", "sm-x64"]]


def backend_of(paths: workload.Paths) -> str:
    return tomllib.loads(paths.config_file.read_text())["database"]["backend"]


def test_goal_state_failing_keeps_everything_and_raises_nothing(ctx, world, resources, machine):
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    (serving,) = world.scalesets()
    machine.systemctl.goal_state = None  # the hook tool fails
    state, relation = with_units(state, relation, {0: {**SOLE_UNIT, "labels": "linux,arm64"}})
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert in_full(ctx, state) == ops.WaitingStatus(
        "Waiting for Juju's goal-state to answer: nothing it may serve is retired until then "
        f"(Replacing scaleset sm-x64 ({serving['name']}): handing over)"
    )
    assert serving in world.scalesets() and len(world.scalesets()) == 2  # created, kept
    follower = make_state(world, resources, relation, leader=False)
    assert ctx.run(ctx.on.update_status(), follower).unit_status.name == "active"


def test_an_application_of_this_model_scaled_to_zero_before_this_unit_led_is_intent(
    ctx, world, resources, machine, later
):
    # A new leader never saw the units go, but Juju lists the application with none left.
    relation = configurator(SOLE_UNIT)
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    ctx.run(ctx.on.update_status(), make_state(world, resources, relation))
    later()  # the application is scaled to zero, and leadership moves, later
    machine.systemctl.goal_state = goal_state()
    empty = dataclasses.replace(relation, remote_units_data={})
    ctx.run(ctx.on.leader_elected(), make_state(world, resources, empty))
    assert world.scalesets() == []  # nothing asks for its labels: retired and deleted


def test_a_new_leader_on_postgresql_never_starts_beside_sqlite_data_that_was_not_moved(
    ctx, world, resources, machine
):
    # garm/1 holds scalesets in sqlite and refused to move them to PostgreSQL; garm/0,
    # added later, becomes leader with the PostgreSQL answer in hand.
    garm_units(machine, 1)
    state = ctx.run(
        ctx.on.install(), make_state(world, resources, peers("garm/1", 1), leader=False)
    )
    state, _ = relate_postgresql(ctx, dataclasses.replace(state, leader=True))
    # A new leader tells the others first (juju.fence); its next pass finds the data.
    state = ctx.run(ctx.on.config_changed(), state)
    assert state.unit_status == ops.BlockedStatus(
        "GARM's sqlite data is on garm/1: scale to one unit so that it leads"
    )
    assert not machine.paths.config_file.exists() and world.writes() == []
