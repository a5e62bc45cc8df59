"""Which GARM the charm set up, so that it never sets up another one in its place.

GARM makes its ``controller_id`` at its first run and keeps it in its database
(docs/reference/garm-api.md §1.3), and only that GARM listens to the scale sets GitHub holds
for it. A GARM on another database would be set up afresh and report "in sync" while jobs
wait for a listener that never comes. So the leader records the id and where the database is
in the peer relation (``garm-identity``), and sets up no GARM that answers otherwise until the
operator adopts it (``adopt-garm``). Two ways to a new GARM lose nothing on GitHub and need no
action: no record yet, and the charm's own move from sqlite to PostgreSQL (``garm.database``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from garm.config import Database, SqliteDatabase

logger = logging.getLogger(__name__)

KEY = "garm-identity"
# What ``adopt-garm`` takes instead of an id: the empty GARM that answers now is to be
# set up afresh (and its new id recorded once it has one).
NEW = "new"
_SQLITE = "sqlite on "
_POSTGRESQL = "postgresql "


@dataclass(frozen=True)
class Identity:
    """A GARM: its ``controller_id``, and where its database is (``where``: no secret)."""

    controller_id: str
    database: str

    def render(self) -> str:
        """The peer data's value (JSON)."""
        return json.dumps({"controller_id": self.controller_id, "database": self.database})

    @classmethod
    def read(cls, text: str | None) -> Identity | None:
        """The peer data's value; None when there is none, or it does not read.

        One that does not read was edited by hand: warned, and written over next.
        """
        if not text:
            return None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        keys = ("controller_id", "database")
        if isinstance(data, dict) and all(isinstance(data.get(f), str) and data[f] for f in keys):
            return cls(data["controller_id"], data["database"])
        logger.warning("ignored the peer data's %s, which does not read: %r", KEY, text)
        return None

    def describe(self) -> str:
        """The GARM as the operator reads it."""
        return f"{self.controller_id} in {self.database}"


def where(database: Database | None, unit: str) -> str:
    """Where GARM's data is, as the operator reads it (no login); None: not configured yet."""
    if database is None:
        return f"no database configured on {unit}"
    if isinstance(database, SqliteDatabase):
        return f"{_SQLITE}{unit}"
    return f"{_POSTGRESQL}{database.hostname}:{database.port}/{database.database}"


def _adopt(app: str, controller_id: str) -> str:
    return f"juju run {app}/leader adopt-garm controller-id={controller_id}"


def refusal(recorded: Identity | None, answered: str | None, here: str, app: str) -> str:
    """Why GARM, answering ``answered`` (None: empty) in ``here``, is not set up; "": it is.

    The text is the status: both GARMs, and what the operator may run on ``app``.
    """
    if recorded is None or answered == recorded.controller_id:
        return ""
    if recorded.database.startswith(_SQLITE) and here.startswith(_POSTGRESQL):
        return ""  # GARM left the recorded sqlite database for PostgreSQL: the charm's move
    now = "empty" if answered is None else answered
    word = NEW if answered is None else answered
    return (
        f"GARM in {here} is {now}, not the charm's GARM {recorded.describe()}: "
        "integrate that database again, or delete the old GARM's scale sets on GitHub, "
        f"then run: {_adopt(app, word)}"
    )


def to_record(recorded: Identity | None, answered: str, here: str) -> Identity | None:
    """What to record once GARM answered ``answered`` and ``refusal`` let it be set up.

    None: the record stands (an empty id is never recorded). The same GARM reached
    elsewhere now (PostgreSQL's primary moved) has its record follow it.
    """
    found = Identity(answered, here)
    return None if found == recorded or not answered else found


@dataclass(frozen=True)
class Adoption:
    """What ``adopt-garm`` records, or why it refuses (``refused``).

    ``record`` None: the record goes, till the empty GARM's first run gives it an id.
    """

    record: Identity | None = None
    refused: str = ""


def adoption(asked: str, answered: str | None, here: str, app: str) -> Adoption:
    """The operator's word that GARM as it answers now is the charm's (``adopt-garm``).

    ``asked`` (an id, or ``NEW`` for an empty GARM) must be what GARM answers now, so that
    a GARM that changed again since is not taken on an old word. A refusal names the
    action to run on ``app``, the application's name as deployed.
    """
    if asked == NEW:
        if answered is None:
            return Adoption()
        keep = f"to keep it, run: {_adopt(app, answered)}"
        return Adoption(refused=f"GARM in {here} is not empty: it is {answered}; {keep}")
    if answered is None:
        start = f"to start it afresh, run: {_adopt(app, NEW)}"
        return Adoption(refused=f"GARM in {here} is empty: {start}")
    if asked != answered:
        return Adoption(refused=f"GARM in {here} is {answered}, not {asked}")
    return Adoption(Identity(answered, here))
