"""The fence on two machines sharing one database: never two GARMs, under real systemd.

garm/0 leads and runs GARM on the shared PostgreSQL; garm/1 stands by. garm/0's agent
is cut off (no more hooks there; its timers still run) and Juju makes garm/1 the leader.
garm/1's passes wait, as the fence says, for garm/0's GARM to stop (the whole lease it
recorded, its lease's check and a margin); garm/0's GARM stops by itself when its lease
lapses. garm/0 back, its next hook does not start GARM. The wait is real time: at the
least reconcile-interval, some 190 s, so the test runs only when asked
(``GARM_MACHINE_FENCE=1``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import pickle
import time
from collections.abc import Iterator

import pytest
from ops import testing

from juju import fence
from tests.machine_tier import UNIT_FILE
from tests.machine_tier.hook import LOCK, PEER_ID, STATE
from tests.machine_tier.juju_exec import AGENT_DOWN
from tests.machine_tier.tier import hook, logged, show
from tests.nspawn import Machine
from tests.postgresql import REL_ID

INTERVAL = 10
# The longest the new leader waits for a unit that never says its GARM stopped.
FENCE = fence.lease_seconds(INTERVAL) + fence.CHECK_SECONDS + fence.MARGIN_SECONDS

pytestmark = pytest.mark.skipif(
    not os.environ.get("GARM_MACHINE_FENCE"),
    reason=f"the fence takes {FENCE} s of real time: GARM_MACHINE_FENCE=1 runs it",
)


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


def test_a_cut_off_leaders_garm_stops_before_the_new_leaders_starts(
    pair: tuple[Machine, Machine],
) -> None:
    old, new = pair
    hook(old, "install", reconcile_interval=INTERVAL)
    old.sh("chown garm:garm /var/lib/garm/postgresql")  # the database server's own files
    hook(old, "relate-postgresql")
    # Its timer's next pass: the first that reads GARM's configuration on PostgreSQL,
    # so it no longer says it holds sqlite data (``juju.peers``).
    hook(old, "reconcile-tick")
    hook(new, "install", reconcile_interval=INTERVAL)
    with juju_state(old) as leading, juju_state(new) as standing:
        database = leading[0].get_relation(REL_ID)
        relations = [*standing[0].relations, database]
        secrets = list({s.id: s for s in [*standing[0].secrets, *leading[0].secrets]}.values())
        standing[0] = dataclasses.replace(standing[0], relations=relations, secrets=secrets)
    share(old, new)
    share(new, old)
    print(
        f"garm/0 leads, GARM {show(old, 'garm', 'ActiveState')}; garm/1: "
        f"{hook(new, 'update-status')}"
    )
    assert show(old, "garm", "ActiveState")["ActiveState"] == "active"

    # garm/0 is cut off; Juju makes garm/1 the leader (garm/0 is never told).
    old.path(str(AGENT_DOWN)).touch()
    cut = time.time()
    with juju_state(old) as state:
        state[0] = dataclasses.replace(state[0], leader=False)
    with juju_state(new) as state:
        state[0] = dataclasses.replace(state[0], leader=True)
    print(f"garm/1 elected: {hook(new, 'leader-elected')}")

    deadline = time.monotonic() + FENCE + 60
    while show(new, "garm", "ActiveState").get("ActiveState") != "active":
        assert time.monotonic() < deadline, f"garm/1's GARM not started in {FENCE + 60} s"
        time.sleep(1)
    stopped = logged(old, "garm.service", "Stopped garm.service")
    started = logged(new, "garm.service", "Started garm.service")
    by = old.sh("journalctl -u garm-lease.service -o cat --no-pager | grep stopping || :")
    gap = started[-1] - stopped[-1]
    # Both running now counts as overlap until now; else what the journals say.
    both = show(old, "garm", "ActiveState")["ActiveState"] == "active"
    overlap = time.time() - started[-1] if both else max(0.0, -gap)
    print(
        f"garm/0's GARM stopped {stopped[-1] - cut:.1f} s after the cut ({by.strip()!r}); "
        f"garm/1's started {started[-1] - cut:.1f} s after it (fence {FENCE} s): "
        f"overlap {overlap:.1f} s, gap {gap:.1f} s"
    )
    assert stopped[-1] > cut and "lapsed" in by  # stopped by its lease, after the cut
    assert overlap == 0 and gap > 0  # before the new leader's started: never two GARMs

    # garm/0 back: its next hook (leadership gone) does not start GARM.
    old.path(str(AGENT_DOWN)).unlink()
    share(new, old)
    status = hook(old, "leader-settings-changed")
    again = logged(old, "garm.service", "Started garm.service")
    print(f"garm/0 back: {status}; GARM {show(old, 'garm', 'ActiveState')}")
    assert show(old, "garm", "ActiveState")["ActiveState"] != "active"
    assert all(at < stopped[-1] for at in again)
