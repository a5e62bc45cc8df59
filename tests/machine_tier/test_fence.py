"""The fence on two machines and one PostgreSQL: never two GARMs, under real systemd.

garm/0 leads, first on sqlite (GARM makes its file), then on the tier's PostgreSQL server
(``tests.machine_tier.database``: a container of its own, so that the database outlives
the cut-off unit as it would in a model), placed there by the charm from the relation's
answer; from that hook on, its peer data says its sqlite file is no data. garm/1 stands
by. garm/0's agent is cut off (no hook runs there any more; its timers still do) and
Juju makes garm/1 the leader. garm/1's passes wait, as the fence says, for garm/0's
GARM to stop (the whole lease it recorded, its lease's check and a margin); garm/0's
GARM stops by itself when its lease lapses, and garm/1's starts on the same database:
the same controller, its scaleset still there, nothing to adopt or create again. garm/0
back, its next hook does not start GARM. Each machine has its own network, so two GARMs
that overlapped would both have run, each on its own port, and both show in the
journals. The wait is real time: at the least reconcile-interval, some 190 s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import pickle
import time
from collections.abc import Iterator

from ops import testing

from garm.identity import KEY as IDENTITY_KEY
from garm.identity import Identity
from garm.workload import Paths
from juju import fence
from juju.peers import DATA_KEY
from tests.machine_tier import UNIT_FILE
from tests.machine_tier.database import Server, stored
from tests.machine_tier.hook import LOCK, PEER_ID, STATE
from tests.machine_tier.juju_exec import AGENT_DOWN
from tests.machine_tier.tier import hook, logged, show
from tests.nspawn import Machine

INTERVAL = 10
# The longest the new leader waits for a unit that never says its GARM stopped.
FENCE = fence.lease_seconds(INTERVAL) + fence.CHECK_SECONDS + fence.MARGIN_SECONDS
SQLITE_FILE = Paths().sqlite_file
IN_SYNC = {"status": "active", "message": "1 scaleset in sync"}
# What two units need: an address of GARM's that follows the leader.
SETTINGS = {"reconcile_interval": INTERVAL, "external_url": "http://garm.example:9997"}


@contextlib.contextmanager
def juju_state(machine: Machine) -> Iterator[list[testing.State]]:
    """The unit's state as Juju holds it, changed between its hooks (the machine lock
    held): a one-item list whose item is written back."""
    with machine.path(str(LOCK)).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = [pickle.loads(machine.path(str(STATE)).read_bytes())]  # noqa: S301 (ours)
        yield held
        machine.path(str(STATE)).write_bytes(pickle.dumps(held[0]))


def share(source: Machine, target: Machine) -> None:
    """Juju carries ``source``'s peer unit data (and app data if it leads) to ``target``."""
    with juju_state(source) as mine, juju_state(target) as theirs:
        number = int(source.path(str(UNIT_FILE)).read_text().split()[0].split("/")[1])
        relation = _peers(theirs[0])
        data = {**relation.peers_data, number: dict(_peers(mine[0]).local_unit_data)}
        app = _peers(mine[0]).local_app_data if mine[0].leader else relation.local_app_data
        new = dataclasses.replace(relation, peers_data=data, local_app_data=app)
        relations = [new if r.id == PEER_ID else r for r in theirs[0].relations]
        theirs[0] = dataclasses.replace(theirs[0], relations=relations)


def _peers(state: testing.State) -> testing.PeerRelation:
    relation = state.get_relation(PEER_ID)
    assert isinstance(relation, testing.PeerRelation)
    return relation


def identity(machine: Machine) -> Identity | None:
    """The GARM the application's peer data says the charm set up."""
    with juju_state(machine) as state:
        return Identity.read(_peers(state[0]).local_app_data.get(IDENTITY_KEY))


def test_a_cut_off_leaders_garm_stops_before_the_new_leaders_starts(
    pair: tuple[Machine, Machine], server: Server
) -> None:
    old, new = pair
    hook(old, "install", **SETTINGS)  # on sqlite: GARM makes its file
    hook(new, "install", **SETTINGS)
    share(new, old)
    hook(old, "relate-postgresql")  # moves GARM to the server
    with juju_state(old) as state:  # what a leader elected now would read of garm/0
        left = _peers(state[0]).local_unit_data
    assert old.path(str(SQLITE_FILE)).exists() and DATA_KEY not in left
    hook(old, "relate-configurator")  # GARM restarted with the configurator's provider
    assert hook(old, "reconcile-tick") == IN_SYNC  # the next pass creates the scaleset
    first = identity(old)
    assert first is not None and first.database.startswith("postgresql")
    # Juju gives garm/1 the same relations (its own view of them) and secrets.
    with juju_state(old) as leading, juju_state(new) as standing:
        shared = [r for r in leading[0].relations if r.id != PEER_ID]
        relations = [*standing[0].relations, *shared]
        secrets = list({s.id: s for s in [*standing[0].secrets, *leading[0].secrets]}.values())
        standing[0] = dataclasses.replace(standing[0], relations=relations, secrets=secrets)
    share(old, new)
    print(
        f"garm/0 leads, GARM {show(old, 'garm', 'ActiveState')}, controller "
        f"{first.controller_id}; garm/1: {hook(new, 'update-status')}"
    )
    assert show(old, "garm", "ActiveState")["ActiveState"] == "active"

    # garm/0 is cut off; Juju makes garm/1 the leader (garm/0 is never told).
    old.path(str(AGENT_DOWN)).touch()
    cut = time.time()
    deadline = int(old.sh("cat /var/lib/garm-charm/lease"))
    with juju_state(old) as state:
        state[0] = dataclasses.replace(state[0], leader=False)
    with juju_state(new) as state:
        state[0] = dataclasses.replace(state[0], leader=True)
    print(f"garm/1 elected: {hook(new, 'leader-elected')}")

    limit = time.monotonic() + FENCE + 60
    while show(new, "garm", "ActiveState").get("ActiveState") != "active":
        assert time.monotonic() < limit, f"garm/1's GARM not started in {FENCE + 60} s"
        time.sleep(1)
    stopped = logged(old, "garm.service", "Stopped garm.service")
    started = logged(new, "garm.service", "Started garm.service")
    by = old.sh("journalctl -u garm-lease.service -o cat --no-pager | grep stopping || :")
    gap = started[-1] - stopped[-1]
    # Both running now counts as overlap until now; else what the journals say.
    both = show(old, "garm", "ActiveState")["ActiveState"] == "active"
    overlap = time.time() - started[-1] if both else max(0.0, -gap)
    print(
        f"garm/0's GARM stopped {stopped[-1] - cut:.1f} s after the cut, "
        f"{stopped[-1] - deadline:+.1f} s after its lease's end ({by.strip()!r}); "
        f"garm/1's started {started[-1] - cut:.1f} s after the cut (fence {FENCE} s): "
        f"overlap {overlap:.1f} s, failover gap {gap:.1f} s"
    )
    assert overlap == 0 and gap > 0  # before the new leader's started: never two GARMs
    assert stopped[-1] > cut and "lapsed" in by  # stopped by its lease, after the cut

    # garm/1's GARM found what garm/0's made: the same controller, the scaleset created
    # once, nothing to adopt.
    status = hook(new, "update-status")
    data = pickle.loads(stored(server.machine))  # noqa: S301 (the simulator's own)
    creates = [r for r in data["requests"] if r.method == "POST" and r.path.endswith("/scalesets")]
    print(
        f"garm/1 leads: {status}; the database's controller {data['_controller_id']}, "
        f"{len(data['_scalesets'])} scaleset(s), {len(creates)} create(s)"
    )
    assert status == IN_SYNC
    assert identity(new) == first and data["_controller_id"] == first.controller_id
    assert len(data["_scalesets"]) == 1 and len(creates) == 1

    # garm/0 back: its next hook (leadership gone) does not start GARM.
    old.path(str(AGENT_DOWN)).unlink()
    share(new, old)
    status = hook(old, "leader-settings-changed")
    again = logged(old, "garm.service", "Started garm.service")
    print(f"garm/0 back: {status}; GARM {show(old, 'garm', 'ActiveState')}")
    assert show(old, "garm", "ActiveState")["ActiveState"] != "active"
    assert all(at < stopped[-1] for at in again)
