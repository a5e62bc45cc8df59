"""Juju's lifecycle as rules: is this unit's view whole, and may it run GARM. Pure.

Why, with sources for the Juju facts: ``docs/adr/0002``. A unit's ``relation-list`` is
its *local* view (units whose ``-joined`` it has run and not yet departed), which can be
short in ways that look exactly like a shrunk deployment: a relation between
``-created`` and its first ``-joined``, a cross-model relation whose units are not in
scope yet, a suspended one. Deleting what such a view does not show would delete what
users have, so a view is *complete* only when Juju itself says nothing is missing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from scalesets.spec import unit_order

# goal-state gives each related unit its workload status, or "dying" once its removal
# began (dead units are left out); each related application, the relation's status.
_DYING = "dying"
_SUSPENDED = frozenset({"suspending", "suspended"})
SQLITE_MULTI_UNIT = (
    "GARM keeps its data in sqlite on one unit: relate postgresql, or scale to one unit"
)


@dataclass(frozen=True)
class RelationView:
    """One garm-configurator relation; ``units`` without one departing in this hook."""

    id: int
    app: str
    units: frozenset[str]


@dataclass(frozen=True)
class View:
    """Whether this unit sees every related configurator unit; if not, who is missing.

    ``partial``: the applications that may have units this unit does not see, whose
    visible units' scalesets must not be retired either. ``cross_model``: those
    goal-state keys by an offer URL, whose unit names follow the offer.
    """

    complete: bool
    missing: str = ""
    partial: frozenset[str] = frozenset()
    cross_model: frozenset[str] = frozenset()


# A view that lacks nothing: every related unit is seen.
WHOLE = View(True)


def assess(
    relations: Iterable[RelationView],
    goal: Mapping[str, str] | None,
    emptied: Collection[int],
    departing: str | None = None,
) -> View:
    """Tell an incomplete view from a shrunk one, per related application.

    ``goal``: goal-state's status of every app and unit under the endpoint (None: it
    could not be read). For an application in this model Juju lists every unit, joined
    here or not. A cross-model one is keyed by its offer URL without its units: there, no
    units in view is the operator's doing only if this unit saw the last one depart
    (``emptied``).
    """
    relations = sorted(relations, key=lambda r: r.id)
    apps = frozenset(r.app for r in relations)
    if goal is None:
        return View(False, "Juju's goal-state to answer", apps)
    cross_model = frozenset(app for app in apps if app not in goal)
    suspended = sorted(name for name, status in goal.items() if status in _SUSPENDED)
    if suspended:
        # A cross-model relation is keyed by its offer URL: which relation it is cannot
        # be told, so everything is held while it is suspended.
        missing = f"the suspended relation with {suspended[0]} to resume"
        return View(False, missing, apps, cross_model)
    gaps: list[tuple[str, str]] = []
    for relation in relations:
        expected = {
            name
            for name, status in goal.items()
            if _is_unit_of(name, relation.app) and status != _DYING
        } - {departing}
        unseen = sorted(expected - relation.units, key=unit_order)
        local = relation.app in goal
        if unseen:
            gaps.append((relation.app, f"{unseen[0]} to join"))
        elif not relation.units and not local and relation.id not in emptied:
            gaps.append((relation.app, f"a unit of {relation.app} to join"))
    if not gaps:
        return View(True, cross_model=cross_model)
    return View(False, gaps[0][1], frozenset(app for app, _ in gaps), cross_model)


def _is_unit_of(name: str, app: str) -> bool:
    """``app/N``, and not an offer URL such as ``admin/model.app`` that starts alike."""
    owner, _, number = name.rpartition("/")
    return owner == app and number.isdigit()


def unit_dying(units: Mapping[str, str] | None, unit: str) -> bool:
    """Whether goal-state says this unit's life is dying (its removal has begun)."""
    return units is not None and units.get(unit) == "dying"


@dataclass(frozen=True)
class SqliteTenancy:
    """Whether this leader may run GARM on its local sqlite data; ``claim``: record it."""

    may_run: bool
    claim: bool = False
    problem: str = ""


def sqlite_tenancy(
    home: str | None, unit: str, holders: Collection[str], alive: Collection[str] | None
) -> SqliteTenancy:
    """Who may run GARM when its data is an sqlite file on one machine.

    A new leader that started an empty GARM would create every scaleset again beside
    those GitHub still holds for the old one (GitHub refuses the duplicate names), so only
    the unit holding the data (``home``, else a unit that says it has the file) runs
    GARM; the first leader to run it records itself. ``alive``: this application's units
    per goal-state (None: unknown, so a unit away is not taken for gone).
    """
    elsewhere = home if home is not None else min(set(holders) - {unit}, default=None)
    if elsewhere is not None and elsewhere != unit:
        if alive is None or elsewhere in alive:
            problem = f"GARM's sqlite data is on {elsewhere}: scale to one unit so that it leads"
        else:
            problem = (
                f"GARM's sqlite data left with {elsewhere}: delete its scale sets on GitHub, "
                "then run the start-empty-garm action"
            )
        return SqliteTenancy(False, problem=problem)
    problem = SQLITE_MULTI_UNIT if alive is not None and len(alive) > 1 else ""
    return SqliteTenancy(True, claim=home is None, problem=problem)
