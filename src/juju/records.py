"""What the readers of Juju hand the leader's pass: plain records, no ops.

Each reader in this package (``view``, ``secrets``, ``peers``) reads Juju and answers
with one of these; the pass (``leader``) takes them without knowing where they came
from, and its tests build them by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from garm.identity import Identity
from garm.refusals import Refusals
from juju import entities
from juju.lifecycle import WHOLE, View
from runners.options import NO_CONTEXT, RunnerContext


@dataclass(frozen=True)
class Configurators:
    """The garm-configurator relations as this hook sees them (``view.JujuView``).

    ``units`` is every visible unit's (name, databag), in a stable order, without what
    this very hook takes away; ``view`` says whether they are all there is. ``apps`` is
    each relation's remote application by relation id, for telling them back. ``runner``
    is what every runner is set up with besides its unit's options, GARM's host aside.
    """

    related: bool
    units: tuple[tuple[str, dict[str, str]], ...] = ()
    view: View = WHOLE
    apps: Mapping[int, str] = field(default_factory=dict)
    runner: RunnerContext = NO_CONTEXT


@dataclass(frozen=True)
class InternalSecrets:
    """What GARM keeps its data with, from the charm's secret (``secrets.read_internal``).

    The JWT secret signs GARM's tokens; the passphrase encrypts what GARM stores and must
    never change.
    """

    jwt_secret: str = field(repr=False)
    db_passphrase: str = field(repr=False)


# What the pass asks of the peer relation's ``sqlite-home`` record: record this unit as
# the one holding GARM's sqlite data, drop this unit's record (GARM's data moved to
# PostgreSQL), or leave it (None).
HomeChange = Literal["claim", "forget"] | None

# What the pass asks of this unit's own ``garm-running`` record (``juju.fence``): say
# GARM may run here with a lease of this many seconds, take it away (GARM is stopped
# here), or leave it (None).
RecordChange = int | Literal["clear"] | None

# What to do with the peer relation's ``garm-identity`` record (``garm.identity``):
# record this GARM as the charm's, drop the record (the next GARM is a new one, recorded
# once it answers), or leave it (None).
IdentityChange = Identity | Literal["forget"] | None


@dataclass(frozen=True)
class PeerRecords:
    """The peer relation as this hook reads it (``peers.Peers``).

    ``home`` is the application's ``sqlite-home`` record; ``holders`` the units whose own
    data says their machine has GARM's sqlite file; ``memory`` what GARM refused, as any
    leader left it (``garm.refusals``); ``memory_whole`` False when some of it did not
    read (a hand edit), so the next pass writes it over. ``entities`` is which of ``org``
    and ``repo`` each configurator unit meant when last read (``juju.entities``), read
    whole or not as ``entities_whole`` says. ``running`` is each unit's ``garm-running``
    record (``juju.fence``), this unit's included, as committed before this hook; None
    when there is no peer relation yet. ``joined`` are the other units in this unit's
    view of the peer relation (those whose ``-joined`` it has run). ``identity`` is the
    GARM the charm set up (``garm.identity``), None before one was recorded.
    """

    home: str | None = None
    holders: frozenset[str] = frozenset()
    memory: Refusals = field(default_factory=Refusals)
    memory_whole: bool = True
    entities: entities.Memory = field(default_factory=dict)
    entities_whole: bool = True
    running: Mapping[str, str] | None = None
    joined: frozenset[str] = frozenset()
    identity: Identity | None = None
