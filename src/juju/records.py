"""What the readers of Juju hand the leader's pass: plain records, no ops.

Each reader in this package (``view``, ``secrets``, ``peers``) reads Juju and answers
with one of these; the pass (``leader``) takes them without knowing where they came
from, and its tests build them by hand. ``Inputs`` is all of one hook's, the leader's
among them (``LeaderInputs``), one type whether a hook reads them (``juju.inputs``) or a
test gives them. ``PassResult`` and ``ActionAnswer`` are what the pass hands back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, cached_property
from pathlib import Path
from typing import Literal

from garm import workload
from garm.config import PostgresqlDatabase, Proxy
from garm.identity import Identity
from garm.providers import Recorded
from garm.refusals import Refusals
from garm.setup import AdminLogin
from garm.tls import Awaited, ServingTls
from juju import entities
from juju.config import CharmConfig, ConfigError
from juju.lifecycle import WHOLE, View
from juju.status import Summary
from observe.token import LeaderGarm
from runners.options import NO_CONTEXT, RunnerContext
from scalesets.reconciler import Outcome


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

    def memory_to_write(self, memory: Refusals) -> Refusals | None:
        """``memory`` to write to the peer relation, None when it is what is there.

        What is there must also read whole: a hand edit is written over, once.
        """
        return None if memory == self.memory and self.memory_whole else memory

    def entities_to_write(self, chosen: entities.Memory) -> entities.Memory | None:
        """Which of org and repo each unit means, to write; None when it is what is there.

        Kept however the pass ends, so that the next one compares with what this one read.
        """
        return None if dict(chosen) == dict(self.entities) and self.entities_whole else chosen


@dataclass(frozen=True)
class Machine:
    """Where GARM lives on this machine (tests point it at a sandbox) and who runs it."""

    paths: workload.Paths
    user: str


class LeaderInputs:
    """What the leader's pass reads from Juju, each answer on first use and once.

    The pass reads in the order its steps need and stops at the first that cannot go
    on, so a hook reads nothing it does not use: a dying leader reads no resource, a pass
    stopped by its config reads no relation, ``network-get`` runs only without an
    ``external-url``. Each is given as the function that reads it: Juju's in a hook
    (``juju.inputs``), a test's answers in a test.
    """

    def __init__(
        self,
        *,
        config: Callable[[], CharmConfig | ConfigError],
        admin: Callable[[], AdminLogin | None],
        internal: Callable[[], InternalSecrets | None],
        configurators: Callable[[], Configurators],
        postgresql: Callable[[], PostgresqlDatabase | None],
        peers: Callable[[], PeerRecords],
        address: Callable[[], str | None],
        tls: Callable[[], ServingTls | Awaited | None],
        proxy: Callable[[], Proxy],
        provider_record: Callable[[], tuple[Recorded, ...] | None],
        resource: Callable[[str], Path | None],
        read_secret: Callable[[str], str | None],
    ):
        self._config, self._admin, self._internal = config, admin, internal
        self._configurators, self._postgresql, self._peers = configurators, postgresql, peers
        self._address, self._tls, self._proxy = address, tls, proxy
        self._provider_record = provider_record
        # A resource's file by name (``garm.resources.NAMES``); None when not attached.
        self.resource = cache(resource)
        # A configurator's secret's value by URI; None when not granted (yet).
        self.read_secret = read_secret

    @cached_property
    def config(self) -> CharmConfig | ConfigError:
        """The checked config, or why it cannot be used: the pass checks which, once."""
        return self._config()

    @cached_property
    def admin(self) -> AdminLogin | None:
        """GARM's admin login, the charm's own secret; None until it exists."""
        return self._admin()

    @cached_property
    def internal(self) -> InternalSecrets | None:
        """GARM's JWT secret and passphrase, the charm's own secret; None until it exists."""
        return self._internal()

    @cached_property
    def configurators(self) -> Configurators:
        """The configurator relations, and how much of them this unit sees."""
        return self._configurators()

    @cached_property
    def postgresql(self) -> PostgresqlDatabase | None:
        """The postgresql provider's usable answer; None until there is one."""
        return self._postgresql()

    @cached_property
    def peers(self) -> PeerRecords:
        """What the peer relation holds."""
        return self._peers()

    @cached_property
    def address(self) -> str | None:
        """The address runners would reach this unit at; None before it has one."""
        return self._address()

    @cached_property
    def tls(self) -> ServingTls | Awaited | None:
        """The certificate GARM is to serve (``garm.tls``); None: no provider related."""
        return self._tls()

    @cached_property
    def proxy(self) -> Proxy:
        """The model's proxy settings."""
        return self._proxy()

    @cached_property
    def provider_record(self) -> tuple[Recorded, ...] | None:
        """The providers a leader last configured GARM with; None before any did."""
        return self._provider_record()


@dataclass(frozen=True)
class Inputs:
    """What one hook tells this unit: who it is, what its machine is, what Juju says.

    ``now`` reads the clock; ``asked`` is when the hook asked Juju whether this unit
    leads (``juju.machine.fence`` counts GARM's lease from it). ``dying``: this unit's removal
    has begun. ``alive`` are this application's units whose removal has not begun, per
    goal-state (None: unknown). ``leader`` is None on a unit that does not lead.
    """

    unit: str
    machine: Machine
    now: Callable[[], datetime]
    asked: datetime
    dying: bool
    alive: frozenset[str] | None
    postgresql_related: bool
    leader: LeaderInputs | None

    @property
    def app(self) -> str:
        """The application's name as deployed, for every hint: a unit is ``<app>/<n>``."""
        return self.unit.partition("/")[0]


@dataclass(frozen=True)
class PassResult:
    """What a pass comes to, for the charm to tell Juju.

    ``outcome`` is the scaleset pass's, None when the pass stopped before it. ``ports``
    are the ports to open and ``workload_version`` GARM's version to show, None to leave
    either as it is. ``publish_back`` is what to write in garm's application databag per
    configurator relation, None to leave it. ``sqlite_home``, ``memory`` and ``chosen``
    (which of org and repo each configurator unit means) go to the peer relation (None:
    unchanged). ``make_secrets`` asks for the charm's own secrets.
    ``publish_telemetry`` False leaves the cos-agent data as it was; ``garm_here`` is
    the leader's GARM for the collector to scrape (None: no GARM runs here).
    ``next_due`` is about when the reconcile timer this pass kept runs the next pass at
    the latest: its interval after this pass ended (sooner if a hook comes first); None
    when this pass kept no timer. ``garm_record`` is what to do with this unit's own
    ``garm-running`` record (``juju.fence``). ``provider_record`` is the providers GARM
    is now configured with, for the charm's secret that the next leader reads (None:
    unchanged). ``garm_identity`` is the GARM to record in the peer relation as the one
    the charm set up (``garm.identity``; None: unchanged). ``requeue_at`` is when a
    pass can next make progress, for one extra pass then (``garm.requeue``; None:
    nothing waits on time).
    """

    summary: Summary
    outcome: Outcome | None = None
    ports: tuple[int, ...] | None = None
    workload_version: str | None = None
    publish_back: Mapping[int, Mapping[str, str]] | None = None
    sqlite_home: HomeChange = None
    memory: Refusals | None = None
    chosen: entities.Memory | None = None
    make_secrets: bool = False
    publish_telemetry: bool = True
    garm_here: LeaderGarm | None = None
    next_due: datetime | None = None
    garm_record: RecordChange = None
    provider_record: tuple[Recorded, ...] | None = None
    garm_identity: Identity | None = None
    requeue_at: datetime | None = None


@dataclass(frozen=True)
class ActionAnswer:
    """An action's results (nested as Juju nests them), or why it failed."""

    results: Mapping[str, object] = field(default_factory=dict)
    failure: str = ""
