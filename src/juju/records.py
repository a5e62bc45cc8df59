"""What the readers of Juju hand the leader's pass, and what it hands back: plain records.

No ops: a hook reads them (``charm``), or a test builds them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Generic, Literal, TypeVar

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

T = TypeVar("T")


@dataclass(frozen=True)
class Configurators:
    """The garm-configurator relations as this hook sees them (``view.JujuView``).

    ``units``: each visible unit's (name, databag), without what this hook takes away;
    ``view``: whether they are all there is. ``apps``: each relation's remote application
    by id. ``runner``: what every runner gets besides its unit's options and GARM's host.
    """

    related: bool
    units: tuple[tuple[str, dict[str, str]], ...] = ()
    view: View = WHOLE
    apps: Mapping[int, str] = field(default_factory=dict)
    runner: RunnerContext = NO_CONTEXT


@dataclass(frozen=True)
class InternalSecrets:
    """GARM's JWT signing secret, and the passphrase of what it stores (which never changes)."""

    jwt_secret: str = field(repr=False)
    db_passphrase: str = field(repr=False)


# The peer relation's ``sqlite-home`` record: claim it for this unit, which holds GARM's
# sqlite data; forget this unit's (the data moved to PostgreSQL); None leaves it.
HomeChange = Literal["claim", "forget"] | None

# This unit's own ``garm-running`` record (``juju.fence``): GARM may run here with a lease
# of this many seconds; "clear": GARM is stopped here; None leaves it.
RecordChange = int | Literal["clear"] | None

# The peer relation's ``garm-identity`` record (``garm.identity``): this GARM is the
# charm's; "forget": the next GARM is a new one, recorded once it answers; None leaves it.
IdentityChange = Identity | Literal["forget"] | None


@dataclass(frozen=True)
class PeerRecords:
    """The peer relation as this hook reads it (``peers.Peers``).

    ``home``: the ``sqlite-home`` record; ``holders``: the units whose machine has GARM's
    sqlite file. ``memory`` (``garm.refusals``) and ``entities`` (``juju.entities``) are
    as any leader left them; ``*_whole`` False when some of it did not read (a hand edit),
    so the next pass writes it over. ``running``: each unit's ``garm-running`` record
    (``juju.fence``) as committed before this hook, None with no peer relation yet.
    ``joined``: the other units whose ``-joined`` this one has run. ``identity``: the
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
        """``memory`` to write, None when it is what is there and read whole."""
        return None if memory == self.memory and self.memory_whole else memory

    def entities_to_write(self, chosen: entities.Memory) -> entities.Memory | None:
        """``chosen`` to write, None when it is what is there and read whole.

        Kept however the pass ends, so that the next one compares with what this one read.
        """
        return None if dict(chosen) == dict(self.entities) and self.entities_whole else chosen


@dataclass(frozen=True)
class Machine:
    """Where GARM lives on this machine (tests point it at a sandbox) and who runs it."""

    paths: workload.Paths
    user: str


class _Answer(Generic[T]):
    """One of ``LeaderInputs``' answers: its reader, ``_<name>``, runs on first use, once."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, inputs: LeaderInputs, owner: type) -> T:
        answer = getattr(inputs, f"_{self.name}")()
        setattr(inputs, self.name, answer)  # the instance's own attribute is read from now on
        return answer


class LeaderInputs:
    """What the leader's pass reads from Juju, each answer read on first use, once.

    So a hook reads nothing the pass does not use: a dying leader reads no resource, a
    pass stopped by its config no relation, ``network-get`` runs only without an
    ``external-url``.
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

    # Each answer, read on first use.
    config: _Answer[CharmConfig | ConfigError] = _Answer()  # the pass checks which, once
    admin: _Answer[AdminLogin | None] = _Answer()  # the charm's own secret; None until made
    internal: _Answer[InternalSecrets | None] = _Answer()  # the same
    configurators: _Answer[Configurators] = _Answer()
    postgresql: _Answer[PostgresqlDatabase | None] = _Answer()  # None until it is usable
    peers: _Answer[PeerRecords] = _Answer()
    address: _Answer[str | None] = _Answer()  # where runners reach this unit, once it has one
    tls: _Answer[ServingTls | Awaited | None] = _Answer()  # to serve; None: no provider related
    proxy: _Answer[Proxy] = _Answer()  # the model's proxy settings
    provider_record: _Answer[tuple[Recorded, ...] | None] = _Answer()  # as a leader last set


@dataclass(frozen=True)
class Inputs:
    """What one hook tells this unit: who it is, what its machine is, what Juju says.

    ``asked``: when the hook asked whether this unit leads (GARM's lease counts from it).
    ``alive``: the units whose removal has not begun, per goal-state (None: unknown).
    ``leader`` is None on a unit that does not lead.
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
    """What a pass comes to, for the charm to tell Juju; None leaves a thing as it is.

    ``outcome``: the scaleset pass's, None when the pass stopped before it.
    ``publish_back``: garm's application databag per configurator relation.
    ``publish_telemetry`` False leaves the cos-agent data as it was; ``garm_here``: the
    leader's GARM for the collector to scrape. ``next_due``: the reconcile timer's next
    pass at the latest. ``provider_record``: the providers GARM now has, for the next
    leader. ``requeue_at``: when a pass can next make progress (``garm.requeue``).
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
