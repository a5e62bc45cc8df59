"""The lifecycle rules as a table: when a view is whole, who may run GARM on sqlite."""

from __future__ import annotations

import pytest

from juju.lifecycle import (
    SQLITE_MULTI_UNIT,
    RelationView,
    View,
    assess,
    sqlite_tenancy,
    unit_dying,
)

A = "cfg"


def rel(*units: int, id: int = 1, app: str = A) -> RelationView:
    return RelationView(id, app, frozenset(f"{app}/{n}" for n in units))


B = "other"
BOTH = frozenset({A, B})


def gap(missing: str, *apps: str, cross_model: frozenset[str] = frozenset()) -> View:
    return View(False, missing, frozenset(apps), cross_model)


@pytest.mark.parametrize(
    ("relations", "goal", "emptied", "departing", "expected"),
    [
        # Every unit Juju lists is seen: whole. (Units carry their workload status.)
        (
            [rel(0, 1)],
            {A: "joined", f"{A}/0": "active", f"{A}/1": "waiting"},
            (),
            None,
            View(True),
        ),
        # A unit Juju lists that has not joined here yet holds its application only.
        (
            [rel(0), rel(0, id=2, app=B)],
            {
                A: "joined",
                f"{A}/0": "active",
                f"{A}/1": "allocating",
                B: "joined",
                f"{B}/0": "active",
            },
            (),
            None,
            gap("cfg/1 to join", A),
        ),
        # The lowest unit number is named first, numerically.
        (
            [rel()],
            {A: "joined", f"{A}/10": "active", f"{A}/9": "active"},
            (),
            None,
            gap("cfg/9 to join", A),
        ),
        # Dying units are not waited for; dead ones are not listed at all.
        ([rel(0)], {A: "joined", f"{A}/0": "active", f"{A}/2": "dying"}, (), None, View(True)),
        # The unit departing in this very hook is not waited for.
        ([rel(0)], {A: "joined", f"{A}/0": "active", f"{A}/1": "active"}, (), "cfg/1", View(True)),
        # -created before any -joined: Juju lists the units that have not joined here.
        ([rel()], {A: "joining", f"{A}/0": "allocating"}, (), None, gap("cfg/0 to join", A)),
        # An application of this model with no unit at all: nothing is unseen.
        ([rel()], {A: "joined"}, (), None, View(True)),
        # A cross-model application: Juju lists no units of it, keyed by its offer URL,
        # so no units in view is not "none wanted" ...
        (
            [rel()],
            {"admin/other.cfg": "joined"},
            (),
            None,
            gap("a unit of cfg to join", A, cross_model=frozenset({A})),
        ),
        # ... unless this unit saw the last one depart.
        (
            [rel()],
            {"admin/other.cfg": "joined"},
            (1,),
            None,
            View(True, cross_model=frozenset({A})),
        ),
        # A relation being suspended, or suspended, even one already gone from the view:
        # which one it is cannot be told from an offer URL, so every application waits.
        (
            [rel(0), rel(0, id=2, app=B)],
            {"admin/m.cfg": "suspending", B: "joined", f"{B}/0": "active"},
            (),
            None,
            View(False, "the suspended relation with admin/m.cfg to resume", BOTH, frozenset({A})),
        ),
        ([], {A: "suspended"}, (), None, gap("the suspended relation with cfg to resume")),
        # An offer URL is not a unit, even of an application whose name it starts with.
        (
            [rel(0, app="admin")],
            {"admin": "joined", "admin/0": "active", "admin/m.cfg": "joined"},
            (),
            None,
            View(True),
        ),
        # Other applications' units are not this relation's.
        ([rel(0)], {A: "joined", f"{A}/0": "active", "cfgx/1": "active"}, (), None, View(True)),
        # goal-state unreadable: nothing is known.
        (
            [rel(0), rel(id=2, app=B)],
            None,
            (),
            None,
            View(False, "Juju's goal-state to answer", BOTH),
        ),
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
    ("home", "holders", "alive", "may_run", "claim", "problem"),
    [
        # The first leader to run GARM records itself.
        (None, set(), {"garm/0"}, True, True, ""),
        (None, {"garm/0"}, {"garm/0"}, True, True, ""),
        ("garm/0", set(), {"garm/0"}, True, False, ""),
        # A second unit is refused in words an operator acts on; the home keeps serving.
        ("garm/0", set(), {"garm/0", "garm/1"}, True, False, SQLITE_MULTI_UNIT),
        # Another unit holds the data: never start an empty GARM here.
        ("garm/1", set(), {"garm/0", "garm/1"}, False, False, "GARM's sqlite data is on garm/1"),
        ("garm/1", set(), None, False, False, "GARM's sqlite data is on garm/1"),
        # ... even when no leader recorded it yet (an upgrade from before the record).
        (None, {"garm/1"}, {"garm/0", "garm/1"}, False, False, "GARM's sqlite data is on garm/1"),
        # It is gone for good: only the operator can say the old scale sets are cleaned up.
        ("garm/1", set(), {"garm/0"}, False, False, "GARM's sqlite data left with garm/1"),
    ],
)
def test_sqlite_tenancy(home, holders, alive, may_run, claim, problem):
    tenancy = sqlite_tenancy(home, "garm/0", holders, alive)
    assert (tenancy.may_run, tenancy.claim) == (may_run, claim)
    assert tenancy.problem.startswith(problem) and bool(tenancy.problem) == bool(problem)
