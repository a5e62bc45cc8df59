"""Where GARM keeps its data, chosen from what GARM runs on and what Juju offers.

Never switched on a guess (an empty database means every scaleset made again beside
GitHub's): an unreadable answer keeps the database, a lost relation on PostgreSQL asks
the operator, and GARM leaves sqlite only while it holds no scaleset. Pure but for the
``scalesets`` reader it is handed, called only for a move from sqlite.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from garm.config import Database, PostgresqlDatabase, SqliteDatabase
from garm.models import ScaleSet


@dataclass(frozen=True)
class DatabaseChoice:
    """The database to configure GARM with (None: wait for ``waiting``, start nothing).

    ``problem`` is told of the ``postgresql`` relation; ``blocking``: only the operator can fix it.
    """

    database: Database | None
    problem: str = ""
    blocking: bool = False
    waiting: str = ""


def choose_database(
    current: Database | None,
    related: bool,
    answer: PostgresqlDatabase | None,
    scalesets: Callable[[], Sequence[ScaleSet] | None],
    local: SqliteDatabase,
) -> DatabaseChoice:
    """The database for GARM's configuration.

    ``current``: what it names now (None before written); ``scalesets``: GARM's, read only
    for a move from sqlite (None: unread, they may exist); ``local``: the sqlite file used
    without PostgreSQL.
    """
    if answer is not None:
        if isinstance(current, SqliteDatabase) and scalesets() != []:
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
