"""Where GARM keeps its data, chosen from what GARM runs on and what Juju offers.

Pure: the pass hands in the database GARM's configuration names now, whether a
``postgresql`` relation exists and what its provider answered, and GARM's scalesets
when they matter. Never switched on a guess: an empty database would make the
reconciler build every scaleset again beside the ones GitHub already has. So an answer
that cannot be read now keeps the database GARM uses, losing the relation while GARM is
on PostgreSQL asks the operator, and GARM moves from sqlite only while it holds no
scaleset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from garm.config import Database, PostgresqlDatabase, SqliteDatabase
from garm.models import ScaleSet


@dataclass(frozen=True)
class DatabaseChoice:
    """The database to configure GARM with, or why there is none yet.

    ``database`` None means wait (``waiting`` says for what) and start nothing. A
    ``problem`` is told about the ``postgresql`` relation; ``blocking`` when only the
    operator can resolve it.
    """

    database: Database | None
    problem: str = ""
    blocking: bool = False
    waiting: str = ""


def moving_to_postgresql(current: Database | None, answer: PostgresqlDatabase | None) -> bool:
    """Whether GARM, on sqlite now, is offered PostgreSQL: then its scalesets decide."""
    return answer is not None and isinstance(current, SqliteDatabase)


def choose_database(
    current: Database | None,
    related: bool,
    answer: PostgresqlDatabase | None,
    scalesets: Sequence[ScaleSet] | None,
    local: SqliteDatabase,
) -> DatabaseChoice:
    """The database for GARM's configuration.

    ``current`` is what GARM's configuration names now (None before it is written),
    ``related`` whether a postgresql relation exists, ``answer`` its provider's usable
    answer (None until there is one), ``scalesets`` GARM's scalesets before it is
    reconfigured (None when not read or unreadable: they may exist), and ``local`` the
    sqlite file GARM uses without PostgreSQL.
    """
    if answer is not None:
        if moving_to_postgresql(current, answer) and scalesets != []:
            reason = (
                "GARM keeps scalesets in its local sqlite database, which is not moved "
                "to PostgreSQL: remove the postgresql relation, or the scalesets first"
            )
            return DatabaseChoice(current, reason, blocking=True)
        return DatabaseChoice(answer)
    if isinstance(current, PostgresqlDatabase):
        if related:
            reason = "its answer cannot be read now; GARM keeps its database settings"
            return DatabaseChoice(current, reason)
        return DatabaseChoice(
            current, "GARM's data is in PostgreSQL: integrate postgresql again", blocking=True
        )
    if related and current is None:
        return DatabaseChoice(None, waiting="Waiting for PostgreSQL to answer")
    return DatabaseChoice(local)
