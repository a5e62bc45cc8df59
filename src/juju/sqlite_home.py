"""Which garm unit holds GARM's sqlite data, kept in the peer relation.

GARM's sqlite file cannot follow leadership to another machine, so only the unit that
holds it may run GARM (``lifecycle.sqlite_tenancy`` says why). Two records say who that
is: the application's (``sqlite-home``, written by the leader that first ran GARM), and
each unit's own (``sqlite-data``, written by any unit whose machine has the file), so a
leader elected before the first record was made still finds the data's unit. The
``start-empty-garm`` action is the operator's way out once that unit is gone for good.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import ops

from garm import workload
from garm.config import PostgresqlDatabase, SqliteDatabase
from juju import lifecycle
from juju.lifecycle import SqliteTenancy

logger = logging.getLogger(__name__)

PEERS = "garm-peers"
HOME_KEY = "sqlite-home"
DATA_KEY = "sqlite-data"


class SqliteHome(ops.Object):
    """The records of GARM's sqlite data's unit, and the action that gives it up."""

    def __init__(self, charm: ops.CharmBase, alive: lifecycle.Alive, paths: workload.Paths):
        super().__init__(charm, PEERS)
        self._alive = alive
        self._paths = paths
        charm.framework.observe(charm.on.start_empty_garm_action, self._on_start_empty_garm)

    def note_data(self) -> None:
        """Say in this unit's peer data whether its machine holds GARM's sqlite data.

        GARM's configuration says where its data is: a sqlite file left behind after a
        move to PostgreSQL is no data.
        """
        relation = self.model.get_relation(PEERS)
        if relation is None:
            return
        has_data = (
            isinstance(workload.configured_database(self._paths.config_file), SqliteDatabase)
            and self._paths.sqlite_file.exists()
        )
        bag = relation.data[self.model.unit]
        if has_data and DATA_KEY not in bag:
            bag[DATA_KEY] = "true"
        elif not has_data and DATA_KEY in bag:
            del bag[DATA_KEY]

    def tenancy(self, *, claim: bool) -> SqliteTenancy:
        """Whether this leader may start GARM; the first to run it on sqlite is recorded.

        ``claim`` False checks only: a leader starting GARM on PostgreSQL must not do so
        while another unit's sqlite data holds the scalesets, but it holds no sqlite data.
        """
        relation = self.model.get_relation(PEERS)
        holders = (
            {u.name for u in relation.units if relation.data[u].get(DATA_KEY)}
            if (relation)
            else set()
        )
        tenancy = lifecycle.sqlite_tenancy(
            self._home(), self.model.unit.name, holders, self._alive()
        )
        if claim and tenancy.claim and relation is not None:
            relation.data[self.model.app][HOME_KEY] = self.model.unit.name
        return tenancy

    def forget(self) -> None:
        """Drop this unit's record as the data's home: GARM's data moved to PostgreSQL."""
        relation = self.model.get_relation(PEERS)
        if relation is not None and self._home() == self.model.unit.name:
            del relation.data[self.model.app][HOME_KEY]

    def crowded(self) -> bool:
        """Whether more than one unit would share GARM's sqlite data, as any unit can tell."""
        if self.model.get_relation("postgresql") is not None:
            return False
        if isinstance(workload.configured_database(self._paths.config_file), PostgresqlDatabase):
            return False
        alive = self._alive()
        return alive is not None and len(alive) > 1

    def _home(self) -> str | None:
        relation = self.model.get_relation(PEERS)
        return relation.data[self.model.app].get(HOME_KEY) if relation else None

    def _on_start_empty_garm(self, event: ops.ActionEvent) -> None:
        relation, home, unit = self.model.get_relation(PEERS), self._home(), self.model.unit
        alive: Collection[str] = self._alive() or ()
        if not unit.is_leader():
            event.fail("Run this on the leader unit: juju run garm/leader start-empty-garm")
        elif relation is None or home in (None, unit.name):
            event.fail("Nothing to do: this unit already may run GARM")
        elif home in alive or home in {u.name for u in relation.units}:
            event.fail(f"{home} still holds GARM's data: scale to one unit instead")
        else:
            relation.data[self.model.app][HOME_KEY] = unit.name
            logger.warning("GARM's sqlite data on %s given up; %s starts GARM", home, unit.name)
            event.set_results(
                {"previous-home": home, "home": unit.name, "next": "GARM starts at the next hook"}
            )
