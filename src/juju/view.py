"""A unit's view of Juju: the configurator units it sees, and whether it is leaving.

The one reader of relation membership and ``goal-state``, keeping what only one hook
shows (this unit departing, a relation emptied); ``lifecycle`` judges it (why a view
must be whole: ``docs/adr/0002``). The leader also tells units of their scalesets.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import ops
import ops.hookcmds

from juju import lifecycle, publish
from juju.lifecycle import RelationView
from juju.records import Configurators
from runners.options import NO_CONTEXT, DebugSshError, RunnerContext, debug_ssh

logger = logging.getLogger(__name__)

DEBUG_SSH = "debug-ssh"


class JujuView(ops.Object):
    """What the garm-configurator relations ask for, and how much of them this unit sees."""

    # ``dying``: a -departed hook named this unit as departing (-broken, stop and remove
    # carry no departing unit). ``emptied``: ids of configurator relations whose last
    # unit this unit saw depart, so that no units there is what the operator did.
    _stored = ops.StoredState()

    def __init__(self, charm: ops.CharmBase, endpoint: str):
        super().__init__(charm, endpoint)
        self.endpoint = endpoint
        self._goal_state: ops.hookcmds.GoalState | None = None
        self._stored.set_default(dying=False, emptied=[])

    def note(self, event: ops.EventBase) -> None:
        """Keep what this hook alone shows: this unit leaving, a relation emptied."""
        if isinstance(event, ops.RelationDepartedEvent):
            if event.departing_unit == self.model.unit:
                self._stored.dying = True
            elif event.relation.name == self.endpoint:
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
        return bool(self._stored.dying) or lifecycle.unit_dying(self._goal(), self.model.unit.name)

    def alive(self) -> frozenset[str] | None:
        """The units of this unit's application whose removal has not begun, per goal-state."""
        goal = self._goal()
        return None if goal is None else frozenset(n for n, s in goal.items() if s != "dying")

    def configurators(self, event: ops.EventBase | None) -> Configurators:
        """Every configurator unit's databag, in a stable order, minus what is leaving."""
        gone_relation = event.relation.id if isinstance(event, ops.RelationBrokenEvent) else None
        gone_unit = event.departing_unit if isinstance(event, ops.RelationDepartedEvent) else None
        relations = self.model.relations[self.endpoint]
        views: list[RelationView] = []
        units: list[tuple[str, dict[str, str]]] = []
        for relation in sorted(relations, key=lambda r: r.id):
            if relation.id == gone_relation:
                continue
            seen = sorted((u for u in relation.units if u != gone_unit), key=lambda u: u.name)
            app = relation.app.name if relation.app else ""
            views.append(RelationView(relation.id, app, frozenset(u.name for u in seen)))
            units += [(u.name, dict(relation.data[u])) for u in seen]
        gone = gone_unit.name if gone_unit else None
        view = lifecycle.assess(views, self._goal(self.endpoint), self._stored.emptied, gone)
        return Configurators(
            bool(views),
            tuple(units),
            view,
            {r.id: r.app.name for r in relations if r.app},
            self._runner_context(),
        )

    def _runner_context(self) -> RunnerContext:
        """The debug-ssh server every runner is set up with; bad data holds every template."""
        relation = self.model.get_relation(DEBUG_SSH)
        if relation is None:
            return NO_CONTEXT
        units = sorted(relation.units, key=lambda u: u.name)
        try:
            server = debug_ssh((u.name, dict(relation.data[u])) for u in units)
        except DebugSshError as exc:
            logger.error("debug-ssh data refused, runner templates kept as they are: %s", exc)
            hold = f"debug-ssh unit {exc}; runner templates are kept as they are"
            return RunnerContext("", None, hold)
        return RunnerContext("", server)

    def tell(self, wanted: Mapping[int, Mapping[str, str]] | None) -> None:
        """Publish ``publish.published``'s answer on each relation; None leaves them."""
        if wanted is None:
            return
        for relation in self.model.relations[self.endpoint]:
            if relation.id not in wanted:
                continue
            try:
                publish.write(relation.data[self.model.app], wanted[relation.id])
            except ops.ModelError as exc:  # e.g. a cross-model relation being suspended
                logger.warning("scaleset states not published on %s: %s", relation.id, exc)

    def _goal(self, relation: str | None = None) -> dict[str, str] | None:
        """Goal-state's status of this application's units, or ``relation``'s; read once a hook."""
        if self._goal_state is None:
            try:
                self._goal_state = ops.hookcmds.goal_state()
            except (ops.hookcmds.Error, ValueError, KeyError, TypeError, AttributeError) as exc:
                logger.warning("goal-state could not be read: %s", exc)
                return None
        goal = self._goal_state
        units = goal.units if relation is None else goal.relations.get(relation, {})
        return {name: g.status for name, g in units.items()}
