"""Which GARM the charm set up, so that it never sets up another one in its place.

GARM makes its ``controller_id`` once, at its first run, and keeps it in its database
(docs/reference/garm-api.md §1.3): the id GARM answers says which database it runs on.
GitHub holds that GARM's scale sets, and only that GARM listens to them. A GARM on
another database (an empty one, after the postgresql relation was replaced; or one set
up earlier) would be set up afresh and report "in sync", while the jobs GitHub routes to
the old scale sets, labels and all, wait for a listener that never comes.

So the leader records the id of the GARM it set up, and where that GARM's database is,
in the peer relation (``juju.peers``, the ``garm-identity`` key: every unit reads it), and
does not set up a GARM that answers otherwise until the operator says which one is the
charm's (the ``adopt-garm`` action). Pure: the pass reads GARM's controller
(``garm.setup.read_controller``) and hands in what it answered.

Two ways to a new GARM need no action, as they leave nothing on GitHub to lose: no
record yet (a first deployment, or an upgrade from a revision that kept none: what GARM
answers is recorded), and the charm's own move from sqlite to PostgreSQL, which
``garm.database`` makes only while GARM holds no scaleset.
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
_ADOPT = "juju run garm/leader adopt-garm controller-id="


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

        Only a leader writes it, as ``render`` makes it: one that does not read was
        edited by hand, and is written over with what GARM answers next (warned here).
        """
        if not text:
            return None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        fields = ("controller_id", "database")
        if isinstance(data, dict) and all(isinstance(data.get(f), str) for f in fields):
            found = cls(data["controller_id"], data["database"])
            if found.controller_id and found.database:
                return found
        logger.warning("ignored the peer data's %s, which does not read: %r", KEY, text)
        return None

    def describe(self) -> str:
        """The GARM as the operator reads it."""
        return f"{self.controller_id} in {self.database}"


def where(database: Database | None, unit: str) -> str:
    """Where GARM's data is, as the operator reads it: the host and database, no login.

    None is a machine on which the charm has not configured GARM yet.
    """
    if database is None:
        return f"no database configured on {unit}"
    if isinstance(database, SqliteDatabase):
        return f"{_SQLITE}{unit}"
    return f"{_POSTGRESQL}{database.hostname}:{database.port}/{database.database}"


def refusal(recorded: Identity | None, answered: str | None, here: str) -> str:
    """Why GARM, answering ``answered`` in ``here``, must not be set up; "" when it may.

    ``answered`` is GARM's ``controller_id``, None when GARM is empty (it asks for its
    first run). The text is the status: both GARMs, and what the operator may run.
    """
    if recorded is None or answered == recorded.controller_id or _moved(recorded, here):
        return ""
    now = "empty" if answered is None else answered
    word = NEW if answered is None else answered
    was = f"{recorded.controller_id} in {recorded.database}"
    return (
        f"GARM in {here} is {now}, not the charm's GARM {was}: "
        "integrate that database again, or delete the old GARM's scale sets on GitHub, "
        f"then run: {_ADOPT}{word}"
    )


def to_record(recorded: Identity | None, answered: str, here: str) -> Identity | None:
    """What to record once GARM answered ``answered`` and ``refusal`` let it be set up.

    None: the record stands as it is. The same GARM whose database is reached elsewhere
    now (PostgreSQL's primary moved) has its record follow it. An empty id (no GARM
    answers with none) is never recorded.
    """
    found = Identity(answered, here)
    return None if found == recorded or not answered else found


@dataclass(frozen=True)
class Adoption:
    """What ``adopt-garm`` records, or why it refuses (``refused``).

    ``record`` None: the record goes, and the pass records the empty GARM once its first
    run has given it an id.
    """

    record: Identity | None = None
    refused: str = ""


def adoption(asked: str, answered: str | None, here: str) -> Adoption:
    """The operator's word that GARM as it answers now is the charm's (``adopt-garm``).

    ``asked`` is the id the status showed, or ``NEW`` for an empty GARM; it must be what
    GARM answers at the moment (``answered``, None when empty), so that a GARM that
    changed again since is not taken on an old word.
    """
    if asked == NEW:
        if answered is None:
            return Adoption()
        keep = f"to keep it, run: {_ADOPT}{answered}"
        return Adoption(refused=f"GARM in {here} is not empty: it is {answered}; {keep}")
    if answered is None:
        start = f"to start it afresh, run: {_ADOPT}{NEW}"
        return Adoption(refused=f"GARM in {here} is empty: {start}")
    if asked != answered:
        return Adoption(refused=f"GARM in {here} is {answered}, not {asked}")
    return Adoption(Identity(answered, here))


def _moved(recorded: Identity, here: str) -> bool:
    """Whether GARM left the sqlite database recorded for PostgreSQL: the charm's own move."""
    return recorded.database.startswith(_SQLITE) and here.startswith(_POSTGRESQL)
