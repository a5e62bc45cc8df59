"""GARM's identity through the real charm: the GARM it set up, and no other in its place.

Hook sequences as Juju runs them, against the GARM double over HTTP: the charm records
the ``controller_id`` of the GARM it set up and where its database is (peer data
``garm-identity``); a GARM that answers otherwise (an empty PostgreSQL related in place
of the lost one, another GARM's database) gets no write at all, first run included,
until ``adopt-garm`` says it is the charm's. The double plays the GARM of the database
GARM's configuration names (``Databases``): restarted on one it never ran on, it is reset
(``GarmDouble.reset``: no data, no admin, a new ``controller_id``).
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator

import ops
import pytest
from ops import testing

from garm import workload
from garm.identity import KEY, Identity, where
from juju.peers import HOME_KEY, PEERS
from leader import BEING_REMOVED
from tests.charm_states import configurator, in_full, make_state, relate_postgresql
from tests.databags import EXAMPLE_UNIT, SOLE_UNIT
from tests.garm_double import GarmDouble
from tests.juju_events import reconcile_tick
from tests.machine import APP, Machine, goal_state
from tests.postgresql import REL_ID

pytestmark = pytest.mark.usefixtures("machine")

PEER_ID = 9
OLD_DB = "postgresql db.internal:5433/garm"
NEW_DB = "postgresql db2.internal:5432/garm"
IN_SYNC = ops.ActiveStatus("1 scaleset in sync")


@pytest.fixture
def fresh(clock) -> Iterator[GarmDouble]:
    """GARM started on a database no GARM used yet: no admin, no controller URLs."""
    with GarmDouble(clock=clock, initialised=False, urls_set=False) as garm:
        garm.add_provider("garm-configurator-0")
        yield garm
        assert garm.unexpected == []


def recorded(state: testing.State) -> Identity | None:
    peer = state.get_relation(PEER_ID)
    assert isinstance(peer, testing.PeerRelation)
    return Identity.read(peer.local_app_data.get(KEY))


def controller_id(garm: GarmDouble) -> str:
    return garm.controller()["controller_id"]


def sent(garm: GarmDouble) -> list[tuple[str, str]]:
    """Every request that changes GARM (a login aside), first run included."""
    return [
        (r.method, r.path) for r in garm.requests if r.method != "GET" and r.path != "/auth/login"
    ]


def new_database(garm: GarmDouble) -> None:
    """The double as GARM on a database no GARM used: nothing in it, its first run due
    (the double's own admin aside), another id once it has one."""
    garm.reset()
    garm.add_provider("garm-configurator-0")


class Databases:
    """GARM as the database its configuration names at each restart makes it.

    The double is the GARM of the database GARM first ran on; restarted on a database it
    never ran on, it is that database's GARM: empty (``new_database``). Back to one it
    left, it cannot be: the test says so.
    """

    def __init__(self, garm: GarmDouble, machine: Machine, monkeypatch: pytest.MonkeyPatch):
        self.garm, self.paths = garm, machine.paths
        self.current: str | None = None
        self.seen: set[str] = set()
        run = subprocess.run  # the machine's systemctl

        def restarting(cmd, **kwargs):
            done = run(cmd, **kwargs)
            if list(cmd) == ["systemctl", "restart", "garm"]:
                self._started()
            return done

        monkeypatch.setattr(subprocess, "run", restarting)

    def _started(self) -> None:
        database = where(workload.configured_database(self.paths.config_file), "garm/0")
        if database == self.current:
            return
        assert database not in self.seen, f"the double cannot be GARM on {database} again"
        if self.current is not None:
            new_database(self.garm)
        self.current = database
        self.seen.add(database)


@pytest.fixture
def fresh_databases(fresh, machine, monkeypatch) -> Databases:
    return Databases(fresh, machine, monkeypatch)


@pytest.fixture
def databases(world, machine, monkeypatch) -> Databases:
    return Databases(world, machine, monkeypatch)


def on_postgresql(ctx, garm: GarmDouble, resources, machine) -> testing.State:
    """A settled GARM on PostgreSQL, related before any configurator (as the how-to says),
    one scaleset in sync; the charm moved it from sqlite on the way."""
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = make_state(garm, resources, testing.PeerRelation(PEERS, id=PEER_ID))
    state = ctx.run(ctx.on.install(), state)
    state = ctx.run(ctx.on.start(), state)
    state, _ = relate_postgresql(ctx, state)
    relation = configurator(EXAMPLE_UNIT)
    state = dataclasses.replace(state, relations=[*state.relations, relation])
    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
    assert state.unit_status == IN_SYNC
    return state


def lose_postgresql(ctx, state: testing.State) -> testing.State:
    """``juju remove-relation garm postgresql``: -broken, then the relation is gone."""
    state = ctx.run(ctx.on.relation_broken(state.get_relation(REL_ID)), state)
    gone = [r for r in state.relations if r.id != REL_ID]
    state = ctx.run(ctx.on.update_status(), dataclasses.replace(state, relations=gone))
    assert state.unit_status == ops.BlockedStatus(
        "Fix postgresql: GARM's data is in PostgreSQL: integrate postgresql again"
    )
    return state


def adopt(ctx, state: testing.State, controller: str) -> testing.State:
    return ctx.run(ctx.on.action("adopt-garm", params={"controller-id": controller}), state)


# --- the identity is recorded ------------------------------------------------------------


def test_the_move_from_sqlite_to_postgresql_records_the_new_garm_unasked(
    ctx, fresh, fresh_databases, resources, machine
):
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    state = make_state(fresh, resources, testing.PeerRelation(PEERS, id=PEER_ID))
    state = ctx.run(ctx.on.install(), state)
    state = ctx.run(ctx.on.start(), state)
    assert ("POST", "/first-run") in sent(fresh)
    assert recorded(state) == Identity(controller_id(fresh), "sqlite on garm/0")

    # GARM holds no scaleset, so the charm moves it to PostgreSQL: an empty database.
    sqlite = controller_id(fresh)
    state, _ = relate_postgresql(ctx, state)
    assert ("POST", "/first-run") in sent(fresh) and controller_id(fresh) != sqlite
    assert recorded(state) == Identity(controller_id(fresh), OLD_DB)
    assert state.unit_status.message.startswith("Integrate with garm-configurator")


def test_a_garm_seen_first_by_an_upgraded_charm_is_recorded_and_nothing_else_changes(
    ctx, world, resources, machine
):
    # A revision that kept no identity set GARM up: its peer data has none.
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    relation = configurator(SOLE_UNIT)
    peer = testing.PeerRelation(PEERS, id=PEER_ID, local_app_data={HOME_KEY: "garm/0"})
    state = ctx.run(ctx.on.install(), make_state(world, resources, relation, peer))
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == IN_SYNC
    writes = len(world.writes())
    peer = state.get_relation(PEER_ID)
    assert isinstance(peer, testing.PeerRelation)
    upgraded = dataclasses.replace(
        state,
        relations=[
            *(r for r in state.relations if r.id != PEER_ID),
            dataclasses.replace(
                peer, local_app_data={k: v for k, v in peer.local_app_data.items() if k != KEY}
            ),
        ],
    )

    state = ctx.run(ctx.on.upgrade_charm(), upgraded)
    assert state.unit_status == IN_SYNC
    assert recorded(state) == Identity(controller_id(world), "sqlite on garm/0")
    assert world.writes()[writes:] == []


# --- an empty PostgreSQL in place of the lost one -----------------------------------------


def test_an_empty_postgresql_in_place_of_the_lost_one_is_set_up_only_when_adopted(
    ctx, fresh, fresh_databases, resources, machine
):
    state = on_postgresql(ctx, fresh, resources, machine)
    old = controller_id(fresh)
    assert recorded(state) == Identity(old, OLD_DB)
    assert len(fresh.scalesets()) == 1  # GitHub holds it too, with its labels

    state = lose_postgresql(ctx, state)
    # Another PostgreSQL, empty: GARM restarts on it, and asks for its first run.
    state, _ = relate_postgresql(ctx, state, "db2.internal:5432")
    blocked = ops.BlockedStatus(
        f"GARM in {NEW_DB} is empty, not the charm's GARM {old} in {OLD_DB}: integrate that "
        "database again, or delete the old GARM's scale sets on GitHub, then run: "
        "juju run garm/leader adopt-garm controller-id=new"
    )
    assert in_full(ctx, state) == blocked
    for event in (ctx.on.update_status(), ctx.on.config_changed(), reconcile_tick()):
        state = ctx.run(event, state)
        assert in_full(ctx, state) == blocked
    with pytest.raises(testing.ActionFailed, match="The next pass would stop: GARM in"):
        ctx.run(ctx.on.action("plan"), state)
    assert sent(fresh) == []  # no first run, no credential, org or scaleset
    assert fresh.scalesets() == []
    assert recorded(state) == Identity(old, OLD_DB)

    # The operator deleted the old scale sets on GitHub, and starts afresh.
    state = adopt(ctx, state, "new")
    assert ctx.action_results == {
        "previous": f"{old} in {OLD_DB}",
        "adopted": f"a new, empty GARM in {NEW_DB}",
        "next": "the next pass sets it up (now: juju run garm/leader reconcile)",
    }
    assert recorded(state) is None and sent(fresh) == []
    state = ctx.run(ctx.on.update_status(), state)
    assert in_full(ctx, state) == IN_SYNC
    assert ("POST", "/first-run") in sent(fresh)
    assert len(fresh.scalesets()) == 1 and controller_id(fresh) != old
    assert recorded(state) == Identity(controller_id(fresh), NEW_DB)


def test_the_lost_database_integrated_again_needs_no_action(
    ctx, fresh, fresh_databases, resources, machine
):
    state = on_postgresql(ctx, fresh, resources, machine)
    old = controller_id(fresh)
    state = lose_postgresql(ctx, state)
    # The same database, its GARM as it was: nothing to adopt.
    state, _ = relate_postgresql(ctx, state)
    assert state.unit_status == IN_SYNC
    assert controller_id(fresh) == old and recorded(state) == Identity(old, OLD_DB)


# --- another GARM's database ------------------------------------------------------------


def test_another_garm_is_set_up_only_once_its_id_is_adopted(
    ctx, world, databases, resources, machine
):
    state = on_postgresql(ctx, world, resources, machine)
    old = controller_id(world)
    # PostgreSQL now holds another GARM's database (restored from another backup, say),
    # set up with the charm's admin login.
    new_database(world)
    world.add_org("example-org")
    other = controller_id(world)
    state = ctx.run(ctx.on.update_status(), state)
    assert in_full(ctx, state) == ops.BlockedStatus(
        f"GARM in {OLD_DB} is {other}, not the charm's GARM {old} in {OLD_DB}: integrate that "
        "database again, or delete the old GARM's scale sets on GitHub, then run: "
        f"juju run garm/leader adopt-garm controller-id={other}"
    )
    assert sent(world) == []

    with pytest.raises(testing.ActionFailed) as failed:
        adopt(ctx, state, old)  # the id recorded before is not what GARM answers
    assert failed.value.message == f"GARM in {OLD_DB} is {other}, not {old}"
    with pytest.raises(testing.ActionFailed) as failed:
        adopt(ctx, state, "new")
    assert failed.value.message == (
        f"GARM in {OLD_DB} is not empty: it is {other}; to keep it, run: "
        f"juju run garm/leader adopt-garm controller-id={other}"
    )
    assert recorded(state) == Identity(old, OLD_DB) and sent(world) == []

    state = adopt(ctx, state, other)
    assert ctx.action_results is not None
    assert ctx.action_results["adopted"] == f"{other} in {OLD_DB}"
    assert recorded(state) == Identity(other, OLD_DB)
    state = ctx.run(reconcile_tick(), state)
    assert in_full(ctx, state) == IN_SYNC
    assert len(world.scalesets()) == 1


def test_adopt_garm_runs_on_a_live_leader_only(ctx, world, resources, machine):
    peer = testing.PeerRelation(PEERS, id=PEER_ID)
    with pytest.raises(testing.ActionFailed) as failed:
        adopt(ctx, make_state(world, resources, peer, leader=False), "new")
    assert failed.value.message == "Run this on the leader unit: juju run garm/leader adopt-garm"
    machine.systemctl.goal_state = goal_state(status="dying")
    with pytest.raises(testing.ActionFailed) as failed:
        adopt(ctx, make_state(world, resources, peer), "new")
    assert failed.value.message == BEING_REMOVED
    assert world.requests == []


# --- start-empty-garm: a new GARM on sqlite, recorded without adopt-garm -------------------


def test_start_empty_garm_records_the_new_garm_without_adopt_garm(ctx, world, resources, machine):
    # garm/1 ran GARM on sqlite and is gone for good, its data with it.
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    gone = Identity("2d9c4b6a-0f1e-4c3d-8b7a-6e5f4d3c2b1a", "sqlite on garm/1")
    peer = testing.PeerRelation(
        PEERS, id=PEER_ID, local_app_data={HOME_KEY: "garm/1", KEY: gone.render()}
    )
    state = make_state(world, resources, configurator(SOLE_UNIT), peer)
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status.message.startswith("GARM's sqlite data left with garm/1")

    state = ctx.run(ctx.on.action("start-empty-garm"), state)
    assert recorded(state) is None
    state = ctx.run(ctx.on.update_status(), state)
    state = ctx.run(ctx.on.update_status(), state)
    assert state.unit_status == IN_SYNC
    assert recorded(state) == Identity(controller_id(world), "sqlite on garm/0")


def gone_home(*, identity: Identity | None) -> testing.PeerRelation:
    """The peer data once garm/1, which held GARM's sqlite data, is gone for good."""
    data = {HOME_KEY: "garm/1", **({KEY: identity.render()} if identity else {})}
    return testing.PeerRelation(PEERS, id=PEER_ID, local_app_data=data)


GONE = Identity("2d9c4b6a-0f1e-4c3d-8b7a-6e5f4d3c2b1a", "sqlite on garm/1")


@pytest.mark.parametrize(
    "action", ["start-empty-garm", "get-credentials", "plan", "reconcile", "choose-entity"]
)
def test_every_action_passes_the_one_guard(ctx, world, resources, machine, action):
    """Each runs on a live leader only: not on a follower, not on a leader being removed."""
    params = {"unit": f"{APP}/0", "use": "org"} if action == "choose-entity" else None
    peer = gone_home(identity=GONE)
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(
            ctx.on.action(action, params=params), make_state(world, resources, peer, leader=False)
        )
    assert failed.value.message == f"Run this on the leader unit: juju run garm/leader {action}"
    machine.systemctl.goal_state = goal_state(status="dying")
    state = make_state(world, resources, configurator(SOLE_UNIT), peer)
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action(action, params=params), state)
    assert failed.value.message == BEING_REMOVED
    assert world.requests == []


def test_start_empty_garm_gives_nothing_up_on_postgresql(ctx, world, resources, machine):
    """On PostgreSQL no unit holds GARM's data: which GARM is the charm's is adopt-garm's
    to say, after its checks, and the record of the charm's GARM stays."""
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    recorded_before = Identity(controller_id(world), OLD_DB)
    state = make_state(
        world, resources, configurator(SOLE_UNIT), gone_home(identity=recorded_before)
    )
    state, _ = relate_postgresql(ctx, state)
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("start-empty-garm"), state)
    assert failed.value.message.startswith("GARM's data is in PostgreSQL, on no unit")
    assert recorded(state) == recorded_before


def test_start_empty_garm_keeps_a_record_that_names_other_data(ctx, world, resources, machine):
    """Only the record of the GARM on the sqlite data given up goes: one naming other
    data stays, so a new GARM is set up only once adopt-garm has checked it."""
    machine.systemctl.goal_state = goal_state(f"{APP}/0")
    other = Identity("5e6f7a8b-0000-4c3d-8b7a-6e5f4d3c2b1a", OLD_DB)
    state = make_state(world, resources, configurator(SOLE_UNIT), gone_home(identity=other))
    state = ctx.run(ctx.on.action("start-empty-garm"), state)
    assert recorded(state) == other
    state = ctx.run(ctx.on.update_status(), state)
    state = ctx.run(ctx.on.update_status(), state)
    assert in_full(ctx, state).name == "blocked"
    assert "adopt-garm" in in_full(ctx, state).message


def test_start_empty_garm_gives_up_nothing_while_goal_state_cannot_be_read(
    ctx, world, resources, machine
):
    machine.systemctl.goal_state = None
    state = make_state(world, resources, configurator(SOLE_UNIT), gone_home(identity=GONE))
    with pytest.raises(testing.ActionFailed) as failed:
        ctx.run(ctx.on.action("start-empty-garm"), state)
    assert failed.value.message.startswith("Cannot tell which garm units are alive")
