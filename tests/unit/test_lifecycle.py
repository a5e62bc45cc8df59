"""The lifecycle rules as a table: when a view is whole, who may run GARM on sqlite."""

from __future__ import annotations

import pytest

from lifecycle import SQLITE_MULTI_UNIT, RelationView, View, assess, sqlite_tenancy, unit_dying

A = "cfg"


def rel(*units: int, id: int = 1, app: str = A) -> RelationView:
    return RelationView(id, app, frozenset(f"{app}/{n}" for n in units))


@pytest.mark.parametrize(
    ("relations", "goal", "emptied", "departing", "expected"),
    [
        # Every unit Juju lists is seen: whole.
        ([rel(0, 1)], {A: "joined", f"{A}/0": "joined", f"{A}/1": "joined"}, (), None, View(True)),
        # A unit Juju lists that has not joined here yet.
        (
            [rel(0)],
            {f"{A}/0": "joined", f"{A}/1": "joining"},
            (),
            None,
            View(False, "cfg/1 to join"),
        ),
        # The lowest unit number is named first, numerically.
        (
            [rel()],
            {f"{A}/10": "joined", f"{A}/9": "joined"},
            (),
            None,
            View(False, "cfg/9 to join"),
        ),
        # Units leaving scope, or dying, are not waited for.
        (
            [rel(0)],
            {f"{A}/0": "joined", f"{A}/1": "broken", f"{A}/2": "dying"},
            (),
            None,
            View(True),
        ),
        # The unit departing in this very hook is not waited for.
        ([rel(0)], {f"{A}/0": "joined", f"{A}/1": "joined"}, (), "cfg/1", View(True)),
        # -created before any -joined, or units not in scope: no units is not "none wanted".
        ([rel()], {A: "joining"}, (), None, View(False, "a unit of cfg to join")),
        # ... unless this unit saw the last one depart.
        ([rel()], {A: "joined"}, (1,), None, View(True)),
        # A suspended cross-model relation, even one already gone from the view.
        ([], {A: "suspended"}, (), None, View(False, "the suspended relation with cfg to resume")),
        # Other applications' units are not this relation's.
        ([rel(0)], {f"{A}/0": "joined", "cfgx/1": "joined"}, (), None, View(True)),
        # goal-state unreadable: nothing is known.
        ([rel(0)], None, (), None, View(False, "Juju's goal-state to answer")),
        # No relation at all (removed on a live unit): whole.
        ([], {}, (), None, View(True)),
    ],
)
def test_assess(relations, goal, emptied, departing, expected):
    assert assess(relations, goal, emptied, departing) == expected


def test_unit_dying():
    assert unit_dying({"garm/0": "dying"}, "garm/0")
    assert not unit_dying({"garm/0": "active", "garm/1": "dying"}, "garm/0")
    assert not unit_dying(None, "garm/0")


@pytest.mark.parametrize(
    ("home", "peers", "planned", "may_run", "claim", "problem"),
    [
        (None, set(), 1, True, True, ""),
        ("garm/0", set(), 1, True, False, ""),
        ("garm/0", {"garm/1"}, 2, True, False, SQLITE_MULTI_UNIT),
        ("garm/1", {"garm/1"}, 2, False, False, "GARM's sqlite data is on garm/1: scale to"),
        ("garm/1", set(), 1, False, False, "GARM's sqlite data left with garm/1: delete its"),
    ],
)
def test_sqlite_tenancy(home, peers, planned, may_run, claim, problem):
    tenancy = sqlite_tenancy(home, "garm/0", peers, planned)
    assert (tenancy.may_run, tenancy.claim) == (may_run, claim)
    assert tenancy.problem.startswith(problem) and bool(tenancy.problem) == bool(problem)
