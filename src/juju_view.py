"""A unit's view of Juju: the configurator units it sees, and whether it is leaving.

The one place that reads relation membership and ``goal-state`` and keeps what only one
hook shows (this unit departing, a relation losing its last unit); ``lifecycle`` judges
what is read. Why a view must be whole before anything is retired: ``docs/adr/0002``.
"""

from __future__ import annotations

import logging

import ops
import ops.hookcmds

import lifecycle
from lifecycle import RelationView
from state import RelationState, relation_state

logger = logging.getLogger(__name__)


class JujuView(ops.Object):
    """What the garm-configurator relations ask for, and how much of them this unit sees."""

    # ``dying``: a -departed hook named this unit as departing (-broken, stop and remove
    # carry no departing unit). ``emptied``: ids of configurator relations whose last
    # unit this unit saw depart, so that no units there is what the operator did.
    _stored = ops.StoredState()

    def __init__(self, charm: ops.CharmBase, endpoint: str):
        super().__init__(charm, endpoint)
        self._endpoint = endpoint
        self._goal: ops.hookcmds.GoalState | None = None
        self._stored.set_default(dying=False, emptied=[])

    def note(self, event: ops.EventBase) -> None:
        """Keep what this hook alone shows: this unit leaving, a relation emptied."""
        if isinstance(event, ops.RelationDepartedEvent):
            if event.departing_unit == self.model.unit:
                self._stored.dying = True
            elif event.relation.name == self._endpoint:
                remaining = [u for u in event.relation.units if u != event.departing_unit]
                if not remaining and event.relation.id not in self._stored.emptied:
                    self._stored.emptied.append(event.relation.id)
        elif isinstance(event, ops.RelationJoinedEvent):
            if event.relation.id in self._stored.emptied:
                self._stored.emptied.remove(event.relation.id)
        elif isinstance(event, ops.StopEvent):
            self._stored.dying = True

    def dying(self) -> bool:
        """Whether this unit's removal has begun, as a hook here or goal-state says."""
        goal = self._goal_state()
        units = {name: g.status for name, g in goal.units.items()} if goal else None
        return bool(self._stored.dying) or lifecycle.unit_dying(units, self.model.unit.name)

    def relation_state(self, event: ops.EventBase | None) -> RelationState:
        """Every configurator unit's databag, in a stable order, minus what is leaving.

        Whether that view is whole is judged against goal-state (``lifecycle.assess``).
        """
        gone_relation = event.relation.id if isinstance(event, ops.RelationBrokenEvent) else None
        gone_unit = event.departing_unit if isinstance(event, ops.RelationDepartedEvent) else None
        relations = [
            r
            for r in sorted(self.model.relations[self._endpoint], key=lambda r: r.id)
            if r.id != gone_relation
        ]
        members = {
            r.id: sorted((u for u in r.units if u != gone_unit), key=lambda u: u.name)
            for r in relations
        }
        goal = self._goal_state()
        view = lifecycle.assess(
            [
                RelationView(r.id, r.app.name if r.app else "", frozenset(u.name for u in us))
                for r, us in zip(relations, members.values(), strict=True)
            ],
            {name: g.status for name, g in goal.relations.get(self._endpoint, {}).items()}
            if goal
            else None,
            self._stored.emptied,
            gone_unit.name if gone_unit else None,
        )
        units = [(u.name, dict(r.data[u])) for r in relations for u in members[r.id]]
        return relation_state(bool(relations), units, view.complete, view.missing)

    def _goal_state(self) -> ops.hookcmds.GoalState | None:
        """Juju's goal-state, read once per hook; None when the tool fails."""
        if self._goal is None:
            try:
                self._goal = ops.hookcmds.goal_state()
            except (ops.hookcmds.Error, ValueError, KeyError) as exc:
                logger.warning("goal-state could not be read: %s", exc)
        return self._goal
