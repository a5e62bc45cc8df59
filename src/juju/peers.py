"""What garm units keep in their peer relation, and the actions that write to it.

GARM's sqlite file cannot follow leadership, so only the unit that holds it may run GARM
(``lifecycle.sqlite_tenancy``): the application's ``sqlite-home`` (by the leader that
first ran GARM) and each unit's own ``sqlite-data`` (so a leader elected before the
first record still finds it) say which; ``start-empty-garm`` gives up a unit gone for
good. The application's data also keeps what GARM refused (``garm.refusals``), which of
org and repo each configurator unit means (``juju.entities``, ``choose-entity``), and
which GARM the charm set up (``garm.identity``), so that a new leader goes on as the
last one left off. The pass reads it all as ``records.PeerRecords``; this module alone
reads and writes the relation.
"""

from __future__ import annotations

import logging

import ops

from garm import workload
from garm.config import SqliteDatabase
from garm.identity import KEY as IDENTITY_KEY
from garm.identity import Identity, where
from garm.refusals import KEY as MEMORY_KEY
from garm.refusals import Refusals
from juju import entities, fence
from juju.postgresql import RELATION as POSTGRESQL
from juju.records import HomeChange, IdentityChange, PeerRecords, RecordChange
from juju.relation import refused_either_way
from juju.status import refuse_action
from juju.unit import leads
from juju.view import JujuView

logger = logging.getLogger(__name__)

PEERS = "garm-peers"
HOME_KEY = "sqlite-home"
DATA_KEY = "sqlite-data"


class Peers(ops.Object):
    """The peer relation's records, and the actions that write to it."""

    def __init__(self, charm: ops.CharmBase, view: JujuView, paths: workload.Paths):
        super().__init__(charm, PEERS)
        self._view = view
        self._paths = paths
        charm.framework.observe(charm.on.start_empty_garm_action, self._on_start_empty_garm)
        charm.framework.observe(charm.on.choose_entity_action, self._on_choose_entity)

    def note_data(self) -> None:
        """Say in this unit's peer data whether its machine holds GARM's sqlite data.

        As GARM's configuration says (a sqlite file left after a move to PostgreSQL is no
        data), read once the pass that writes it is done: read before, a move would leave
        a stale record, and a leader elected meanwhile would refuse to run GARM.
        """
        relation = self.model.get_relation(PEERS)
        if relation is None:
            return
        has_data = (
            isinstance(workload.configured_database(self._paths.config_file), SqliteDatabase)
            and self._paths.sqlite_file.exists()
        )
        bag = relation.data[self.model.unit]
        if has_data != (DATA_KEY in bag):
            _put(bag, DATA_KEY, "true" if has_data else None)

    def records(self) -> PeerRecords:
        """What the peer relation holds now (nothing before it is created)."""
        relation = self.model.get_relation(PEERS)
        if relation is None:
            return PeerRecords()
        bag = relation.data[self.model.app]
        text = bag.get(MEMORY_KEY)
        # Only a leader writes it, always as ``text()``: anything else was edited.
        whole = not text or Refusals.read(text).text() == text
        if not whole:
            logger.warning("ignored what could not be read of the peer data's %s", MEMORY_KEY)
        chosen, chosen_whole = entities.read(bag.get(entities.KEY))
        if not chosen_whole:
            logger.warning("ignored what could not be read of the peer data's %s", entities.KEY)
        units = (*relation.units, self.model.unit)
        return PeerRecords(
            bag.get(HOME_KEY),
            frozenset(u.name for u in relation.units if relation.data[u].get(DATA_KEY)),
            Refusals.read(text),
            whole,
            chosen,
            chosen_whole,
            {u.name: v for u in units if (v := relation.data[u].get(fence.RECORD_KEY))},
            joined=frozenset(u.name for u in relation.units),
            identity=Identity.read(bag.get(IDENTITY_KEY)),
        )

    def record(self, change: RecordChange) -> None:
        """Write this unit's own ``garm-running`` record as a pass decided (``juju.fence``)."""
        relation = self.model.get_relation(PEERS)
        if relation is not None and change is not None:
            value = None if change == "clear" else str(change)
            _put(relation.data[self.model.unit], fence.RECORD_KEY, value)

    def keep_identity(self, change: IdentityChange) -> None:
        """Write the GARM the charm set up, as a leader's pass or ``adopt-garm`` decided."""
        relation = self.model.get_relation(PEERS)
        if relation is not None and change is not None:
            value = None if change == "forget" else change.render()
            _put(relation.data[self.model.app], IDENTITY_KEY, value)

    def keep(
        self, home: HomeChange, memory: Refusals | None, chosen: entities.Memory | None = None
    ) -> None:
        """Write what a leader's pass decided; ``memory`` or ``chosen`` None leaves it."""
        relation = self.model.get_relation(PEERS)
        if relation is None:
            return
        bag = relation.data[self.model.app]
        if chosen is not None:
            _put(bag, entities.KEY, entities.render(chosen) if chosen else None)
        if home is not None:
            _put(bag, HOME_KEY, self.model.unit.name if home == "claim" else None)
        if memory is not None:
            _put(bag, MEMORY_KEY, memory.text() if memory else None)

    def _on_start_empty_garm(self, event: ops.ActionEvent) -> None:
        """Give up GARM's sqlite data on a unit that is gone for good: a new GARM here.

        Only on sqlite: on PostgreSQL which GARM is the charm's is ``adopt-garm``'s to
        say. The record of the charm's GARM goes only when it names the data given up;
        any other stays, so that the new GARM is set up only once adopted.
        """
        relation, unit = self.model.get_relation(PEERS), self.model.unit
        home = relation.data[self.model.app].get(HOME_KEY) if relation else None
        alive = self._view.alive()
        app, dying = self.model.app.name, self._view.dying()
        if refused := refuse_action(leads(unit), dying, "start-empty-garm", app):
            event.fail(refused)
        elif self._on_postgresql():
            event.fail(
                "GARM's data is in PostgreSQL, on no unit: nothing to give up "
                "(to take another GARM as the charm's, run adopt-garm)"
            )
        elif relation is None or home in (None, unit.name):
            event.fail("Nothing to do: this unit already may run GARM")
        elif alive is None:
            event.fail("Cannot tell which garm units are alive (goal-state failed): try again")
        elif home in alive or home in {u.name for u in relation.units}:
            event.fail(f"{home} still holds GARM's data: scale to one unit instead")
        else:
            bag = relation.data[self.model.app]
            bag[HOME_KEY] = unit.name
            recorded = Identity.read(bag.get(IDENTITY_KEY))
            if recorded is not None and recorded.database == where(
                SqliteDatabase(str(self._paths.sqlite_file)), home
            ):
                # The GARM that starts is a new one: recorded once it answers, unasked.
                bag.pop(IDENTITY_KEY, None)
            logger.warning("GARM's sqlite data on %s given up; %s starts GARM", home, unit.name)
            event.set_results(
                {"previous-home": home, "home": unit.name, "next": "GARM starts at the next hook"}
            )

    def _on_postgresql(self) -> bool:
        related = self.model.get_relation(POSTGRESQL) is not None
        return workload.on_postgresql(self._paths.config_file, related)

    def _on_choose_entity(self, event: ops.ActionEvent) -> None:
        """Record which of ``org`` and ``repo`` a unit means, both checked as the pass does."""
        unit, use = str(event.params.get("unit", "")), event.params.get("use")
        relation = self.model.get_relation(PEERS)
        data = dict(self._view.configurators(None).units).get(unit)
        seen = entities.published(data) if data is not None else None
        app, dying = self.model.app.name, self._view.dying()
        if refused := refuse_action(leads(self.model.unit), dying, "choose-entity", app):
            event.fail(refused)
        elif relation is None:
            event.fail("The peer relation is not there yet: try again after the next hook")
        elif seen is None:
            event.fail(f"No related garm-configurator unit is named {unit!r}")
        elif use not in entities.KINDS:
            event.fail("use must be org or repo")
        elif seen.use is not None:
            event.fail(f"Nothing to choose: {unit} publishes only its {seen.use}")
        elif seen.org is None or seen.repo is None:
            event.fail(f"Nothing to choose: {unit} publishes neither org nor repo")
        elif (refused := refused_either_way(data or {})) is not None:
            event.fail(f"{unit}'s data is refused, whichever it means: invalid {refused}")
        else:
            kind, other = ("org", "repo") if use == "org" else ("repo", "org")
            chosen, _ = entities.read(relation.data[self.model.app].get(entities.KEY))
            chosen[unit] = entities.Seen(seen.org, seen.repo, kind)
            relation.data[self.model.app][entities.KEY] = entities.render(chosen)
            logger.warning("%s: the operator chose its %s %s", unit, kind, seen.value(kind))
            event.set_results(
                {
                    "unit": unit,
                    "serves": f"{kind} {seen.value(kind)}",
                    "ignored": f"{other} {seen.value(other)}",
                    "next": f"the next pass acts on it (now: juju run {app}/leader reconcile)",
                }
            )


def _put(bag: ops.RelationDataContent, key: str, value: str | None) -> None:
    """``key`` set to ``value``, or gone from ``bag`` (None)."""
    if value is None:
        bag.pop(key, None)
    else:
        bag[key] = value
