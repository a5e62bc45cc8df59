"""Which garm unit holds GARM's sqlite data, kept in the peer relation's application data.

GARM's sqlite file cannot follow leadership to another machine, so the unit that first
ran GARM on it is recorded, and only that unit may run GARM (``lifecycle.sqlite_tenancy``
says why). The ``start-empty-garm`` action is the operator's way out once that unit is
gone for good.
"""

from __future__ import annotations

import logging

import ops

import lifecycle
from lifecycle import SqliteTenancy

logger = logging.getLogger(__name__)

PEERS = "garm-peers"
HOME_KEY = "sqlite-home"


class SqliteHome(ops.Object):
    """The record of GARM's sqlite data's unit, and the action that gives it up."""

    def __init__(self, charm: ops.CharmBase):
        super().__init__(charm, PEERS)
        self._charm = charm
        charm.framework.observe(charm.on.start_empty_garm_action, self._on_start_empty_garm)

    def tenancy(self) -> SqliteTenancy:
        """Whether this leader may run GARM on sqlite; records it as the data's first home."""
        relation = self.model.get_relation(PEERS)
        tenancy = lifecycle.sqlite_tenancy(
            self._home(), self.model.unit.name, self._peers(), self.model.app.planned_units()
        )
        if tenancy.claim and relation is not None:
            relation.data[self.model.app][HOME_KEY] = self.model.unit.name
        return tenancy

    def _home(self) -> str | None:
        relation = self.model.get_relation(PEERS)
        return relation.data[self.model.app].get(HOME_KEY) if relation else None

    def _peers(self) -> set[str]:
        relation = self.model.get_relation(PEERS)
        return {u.name for u in relation.units} if relation else set()

    def _on_start_empty_garm(self, event: ops.ActionEvent) -> None:
        relation, home, unit = self.model.get_relation(PEERS), self._home(), self.model.unit
        if not unit.is_leader():
            event.fail("Run this on the leader unit: juju run garm/leader start-empty-garm")
        elif relation is None or home in (None, unit.name):
            event.fail("Nothing to do: this unit already may run GARM")
        elif home in self._peers():
            event.fail(f"{home} still holds GARM's data: scale to one unit instead")
        else:
            relation.data[self.model.app][HOME_KEY] = unit.name
            logger.warning("GARM's sqlite data on %s given up; %s starts GARM", home, unit.name)
            event.set_results({"previous-home": home, "home": unit.name})
