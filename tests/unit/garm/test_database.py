"""Where GARM keeps its data: one row per case of ``choose_database``.

Each row is a moment an operator meets: a fresh machine, a PostgreSQL relation added,
its answer lost for a hook, the relation removed. The rule behind every row: never switch
GARM's database on a guess, for an empty database makes every scaleset be built again
beside the ones GitHub still has.
"""

from __future__ import annotations

import pytest

from garm.config import PostgresqlDatabase, SqliteDatabase
from garm.database import DatabaseChoice, choose_database
from garm.models import ScaleSet

LOCAL = SqliteDatabase("/var/lib/garm/garm.db")
SHARED = PostgresqlDatabase("db.internal", 5432, "garm", "pw", "garm")
OTHER = PostgresqlDatabase("db2.internal", 5432, "garm", "pw", "garm")
SCALESET = ScaleSet.from_json({"id": 1, "name": "lg-x64", "provider_name": "p"})
HOLDS = (
    "GARM keeps scalesets in its local sqlite database, which is not moved to PostgreSQL: "
    "remove the postgresql relation, or the scalesets first"
)

ROWS = {
    # No relation: GARM keeps its data in sqlite on this machine, from the first hook on.
    "fresh, no relation": ((None, False, None, None), DatabaseChoice(LOCAL)),
    "sqlite, no relation": ((LOCAL, False, None, None), DatabaseChoice(LOCAL)),
    # Related, but the provider has not answered: a GARM that never ran does not start.
    "fresh, not answered yet": (
        (None, True, None, None),
        DatabaseChoice(None, waiting="Waiting for PostgreSQL to answer"),
    ),
    # GARM on sqlite before the relation came: it stays there until the answer comes.
    "sqlite, not answered yet": ((LOCAL, True, None, None), DatabaseChoice(LOCAL)),
    "fresh, answered": ((None, True, SHARED, None), DatabaseChoice(SHARED)),
    # Moving an empty GARM loses nothing; a GARM holding scalesets would lose them.
    "sqlite, answered, no scaleset": ((LOCAL, True, SHARED, []), DatabaseChoice(SHARED)),
    "sqlite, answered, scalesets": (
        (LOCAL, True, SHARED, [SCALESET]),
        DatabaseChoice(LOCAL, HOLDS, blocking=True),
    ),
    # GARM could not be read (it is down): it may hold scalesets, so it is not moved.
    "sqlite, answered, GARM unreadable": (
        (LOCAL, True, SHARED, None),
        DatabaseChoice(LOCAL, HOLDS, blocking=True),
    ),
    "postgresql, answered": ((SHARED, True, SHARED, None), DatabaseChoice(SHARED)),
    # A new answer (credentials rotated, another endpoint) is taken as it comes.
    "postgresql, answered anew": ((SHARED, True, OTHER, None), DatabaseChoice(OTHER)),
    # The answer cannot be read this hook (its secret, say): GARM keeps what it has.
    "postgresql, answer unreadable": (
        (SHARED, True, None, None),
        DatabaseChoice(SHARED, "its answer cannot be read now; GARM keeps its database settings"),
    ),
    # The relation is gone: never fall back to an empty sqlite; the operator decides.
    "postgresql, relation removed": (
        (SHARED, False, None, None),
        DatabaseChoice(
            SHARED, "GARM's data is in PostgreSQL: integrate postgresql again", blocking=True
        ),
    ),
}


@pytest.mark.parametrize(("given", "chosen"), ROWS.values(), ids=ROWS.keys())
def test_the_database_chosen(given, chosen):
    current, related, answer, scalesets = given
    assert choose_database(current, related, answer, lambda: scalesets, LOCAL) == chosen


@pytest.mark.parametrize(
    ("current", "answer", "moving"),
    [(LOCAL, SHARED, True), (None, SHARED, False), (SHARED, OTHER, False), (LOCAL, None, False)],
)
def test_garms_scalesets_matter_only_for_a_move_from_sqlite(current, answer, moving):
    reads: list[None] = []
    choose_database(current, True, answer, lambda: reads.append(None) or [], LOCAL)
    assert bool(reads) is moving
