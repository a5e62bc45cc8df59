"""Juju's event sequences through the real charm: two garm units, one GARM, random stories.

Hypothesis tells stories the way a Juju model lives them
(docs/explanation/juju-lifecycle.md §1-§3): configurator applications integrated
before their units join, units added, removed and scaled to zero, relations removed,
configurator leaders changing, configs renamed and relabelled, the garm leader removed
(its self-departing hooks, broken, stop, remove, then the other unit elected) or simply
losing its lease, runners taking and finishing jobs (some only past the drain deadline,
which GitHub then refuses to cut short), GARM's workers ticking, time passing from
seconds to hours (every hook takes a moment too), and
the operator raising and lowering ``reconcile-interval`` (in a machine of its own),
the leader's reconcile timer dispatching ``reconcile-tick`` through juju-exec: as a rule
of its own and between any two hooks of the others, on the leader, on a unit that lost
the lease, or on a dying one. Every hook runs the real ``GarmCharm`` through
``ops.testing`` on the unit's own sandboxed machine, with Juju's ``goal-state`` answered
as the controller would at that moment, against one GARM double (one shared PostgreSQL)
that plays GARM's real pace (listeners seconds after a create, consolidation every 5 min).

After every hook the design's invariants are checked on the double's ground truth (no
label gap, served meaning listening; no serving scaleset of a valid unit retired; no
runner removed before its drain deadline; nothing refused re-sent before the retry time
the peer data remembers, setup writes included (counted on the wire), and a setup write
refused for good leaving the leader blocked; providers only as their unit published them;
no write from a dying
unit; the timer only on the live leader (or a dying leader still serving on its lease),
there once GARM runs; the lease a leader takes outlasting the moment its timer runs the
next pass; a tick on a non-leader or dying unit changing nothing), and every story ends
settled: all units joined, every job ended, then the leader's timer firing (GARM ticking
between) until the leader shows the expected status and writes nothing, twice in a row.

``GARM_SOAK_STEPS`` / ``GARM_SOAK_EXAMPLES`` make the same machine run long (``tox -e soak``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import ops
import pytest
from charmlibs import passwd
from charms.garm_machine.v0.garm_configurator import SERVING, GarmAppData, ScalesetState
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from ops import testing
from scenario.state import _Event

from charm import GarmCharm
from garm import workload
from garm.refusals import (
    LONGEST_RETRY,
    REFUSALS_BEFORE_BLOCKED,
    Refusals,
    backoff,
    digest,
    is_permanent,
)
from juju import entities, fence
from leader import BEING_REMOVED
from scalesets.naming import normalise_labels
from scalesets.notes import Notes
from tests.binaries import fake_garm, fake_provider
from tests.charm_states import make_state
from tests.clock import FakeClock
from tests.databags import EXAMPLE_UNIT, KEY_SECRET_URI
from tests.garm_double import FAKE_APP_KEY, GarmDouble, Recorded
from tests.juju_events import reconcile_tick, self_departing
from tests.machine import FakeSystemctl, LeasedSystemd, goal
from tests.postgresql import (
    PROVIDER_CONFIG,
    PROVIDER_META,
    REL_ID,
    ProviderCharm,
    provider_answers,
    seen_by_requirer,
)
from tests.soak import soak_settings
from tests.wire import T0

CONFIGURATOR = "garm-configurator"
PEERS = "garm-peers"
PEER_ID = 1
ORG = "example-org"
# Where a configurator's runners register: ``juju config cfg-x org=… repo=`` or the
# reverse. The configurator never removes the key it stops using.
Entity = tuple[str, str]  # ("org", name) or ("repo", "owner/name")
ENTITIES = (("org", ORG), ("org", "other-org"), ("repo", f"{ORG}/ci"), ("repo", f"{ORG}/web"))
# Each configurator app's own pool of logical names, so two apps never publish one name.
NAMES = {"cfg-a": ("ci-a", "ci-a2"), "cfg-b": ("ci-b", "ci-b2")}
LABEL_SETS = (("linux",), ("linux", "x64"), ("linux", "arm64"), ("self-hosted", "linux", "x64"))
MAX_CONFIGURATOR_UNITS = 3
DRAIN_DEADLINE = timedelta(minutes=420)  # the charm's default drain-deadline-minutes
# The reconcile timer's default interval (reconcile-interval): how far apart the
# settling passes start.
TIMER_INTERVAL = timedelta(seconds=30)
# While passes find nothing to do, settling waits longer between them, up to one of
# GARM's consolidations: the same passes a longer reconcile-interval would run.
LONGEST_WAIT = timedelta(minutes=5)
# Once every cause is gone (jobs ended, GitHub caught up), the longest a story may take
# to settle: the longest back-off (an hour), a consolidation and a few passes, with margin.
SETTLE_WITHIN = timedelta(hours=2)
# How long a hook takes, as Juju runs them one after another: time moves on between
# any two hooks (GARM's listener opens 4.5 s after a create: a few hooks later).
HOOK_TAKES = timedelta(seconds=2)
# The timer fires between two hooks when a draw from 0..TIMER_ODDS is 0.
TIMER_ODDS = 5
# Hooks this machine runs on which the charm runs no pass (``juju.events``): they read
# nothing of the configurators.
NO_PASS = ("peer joined", "postgresql created", "postgresql-relation-created")
# Where ``drain_deadline_comes`` lands: just before, at, or after the deadline.
AROUND_THE_DEADLINE = tuple(timedelta(seconds=s) for s in (-1, 0, 1, 90))
PHASE_B_KEYS = tuple(k for k in EXAMPLE_UNIT if k.startswith(("openstack_", "github_")))
# A configurator's other GitHub App key (``juju config cfg-x`` rotating it): another
# secret the garm units were granted, a PEM GARM accepts with another fingerprint.
ROTATED_KEY_URI = "secret://3f9c6d2e-1b7a-4c55-8a0e-2f1d9b7c6e40/d0hq2cp5ihkc77rs9m41"
ROTATED_KEY = FAKE_APP_KEY.replace(
    FAKE_APP_KEY.splitlines()[1], base64.b64encode(b"the rotated fake key, PEM framed").decode()
)
# GARM's setup routes a story may have GARM refuse (``garm_refuses_setup``), by what
# they write: the GitHub credentials, the organisations, the controller's URLs.
SETUP_ROUTES = {
    "credential": (("POST", r"/github/credentials/?"), ("PUT", r"/github/credentials/\d+/?")),
    "entity": (
        ("POST", r"/organizations/?"),
        ("PUT", r"/organizations/[^/]+/?"),
        ("POST", r"/repositories/?"),
        ("PUT", r"/repositories/[^/]+/?"),
    ),
    "controller": (("PUT", r"/controller/?"),),
}
# What the stories must reach, or they prove nothing.
KINDS = (
    "created-before-joined",
    "joined",
    "departed",
    "scaled-to-0",
    "scaled-back",
    "broken",
    "cfg-leader-change",
    "rename",
    "two-apps",
    "garm-dying(self-departing)",
    "stop",
    "remove",
    "garm-leader-change",
    "job-started",
    "job-finished",
    "runner-force-removed",
    "github-slow",
    "time-passes-on-a-draining-job",
    "foreign-provider",
    "timer(leader)",
    "timer(non-leader)",
    "timer(dying)",
    "timer-between-hooks",
    "time-passes",
    "removal-refused(job-running)",
    "key-rotated",
    "setup-refused(credential)",
    "setup-refused(entity)",
    "setup-refused(controller)",
    "setup-refusal-blocked",
    "setup-retried-after-backoff",
    "entity-moved",
    "both-org-and-repo",
    "entity-chosen-by-the-operator",
    "settled-following-a-move-it-read",
    "garm-leader-cut-off",
    "cut-off-unit-reconnects",
    "fence-waited",
    "fence-waited-out-a-silent-unit",
    "lease-stopped-garm",
    "external-url-asked-for",
    "requeue-fired",
    "leftover-drained",
)
# What ``IntegratedAgain``'s stories must reach: a scaleset of the removed relation taken
# over by the new one, the serving one a fenced heir left included (``adoptable``).
TAKEOVER_KINDS = ("integrated-again-at-once", "leftover-taken-over", "adoptable-taken-over")
# What the stories exercised, summed over all examples; the test asserts each happened.
COVERAGE: Counter[str] = Counter()


# --- the configurator side ---------------------------------------------------------------


@dataclasses.dataclass
class CfgApp:
    """One garm-configurator application as the model holds it: its config and units.

    ``units`` maps each unit in the model to the unit databag it publishes now. Every unit
    publishes Phase A; the leader also Phase B, which an old leader keeps (stale) after
    losing leadership, because the configurator never deletes those keys.
    """

    name: str
    logical: str
    labels: tuple[str, ...]
    min_idle: str
    rev: int = 0  # bumped by a config change of the OpenStack settings
    units: dict[int, dict[str, str]] = dataclasses.field(default_factory=dict)
    leader: int | None = None
    next_unit: int = 0
    relation_id: int | None = None  # set while integrated with garm
    emptied: bool = False  # scaled to 0 while integrated
    impostor: int | None = None  # a unit whose data names another unit's provider
    key_uri: str = KEY_SECRET_URI  # the GitHub App key its leader publishes
    entity: tuple[str, str] = ("org", ORG)  # its org or repo option
    # Units whose move back to the value their data still held changed nothing in it:
    # garm cannot see the move, so the operator says it (``choose-entity``).
    unseen_moves: set[int] = dataclasses.field(default_factory=set)
    # The org or repo garm can know it means: ``entity`` as of the last move it could see
    # (or the operator told it), held while a move it cannot see is not yet told.
    known: tuple[str, str] = ("org", ORG)
    # GARM's scalesets made for an earlier relation of this application: on their way
    # out since the operator removed it, whatever a new relation asks for, until garm
    # tells the new relation it serves a unit with one (``Lifecycle._taken_over``).
    leftover: frozenset[int] = frozenset()
    # Of those, the serving ones garm must take over (``takeover_when_nothing_changed``),
    # each with what made it so: the units' providers' settings and what the application
    # asks for, as they were at the relation's creation. Dropped once either changes.
    adoptable: dict[int, Any] = dataclasses.field(default_factory=dict)

    def provider(self, n: int) -> str:
        return f"{self.name}-{n}"

    def providers(self) -> frozenset[str]:
        """Every provider name a unit of this application was ever given."""
        return frozenset(self.provider(n) for n in range(self.next_unit))

    def provider_settings(self) -> dict[str, tuple[str, str]]:
        """Each unit's provider with the OpenStack settings it publishes now (Phase B)."""
        return {
            self.provider(n): (data["openstack_username"], data["openstack_network"])
            for n, data in self.units.items()
            if "openstack_username" in data
        }

    def takeover_basis(self) -> Any:
        """What a takeover of a scaleset left from an earlier relation rests on."""
        return self.provider_settings(), self.leader, self.known, self.wanted()

    def phase_a(self, n: int) -> dict[str, str]:
        return {
            "name": self.logical,
            "provider_name": self.provider(n),
            "flavor": "m1.small",
            "os_arch": "amd64",
            "max_runner": "2",
            "min_idle_runner": self.min_idle,
            "labels": ",".join(self.labels),
            self.entity[0]: self.entity[1],
            "image_id": f"image-of-{self.name}",
            "ingress-address": f"10.1.2.{n + 10}",
        }

    def phase_b(self) -> dict[str, str]:
        """The leader's credentials; username and network name the app and config rev."""
        out = {key: EXAMPLE_UNIT[key] for key in PHASE_B_KEYS}
        out["openstack_username"] = f"{self.name}-r{self.rev}"
        out["openstack_network"] = f"{self.name}-net-r{self.rev}"
        out["github_private_key_secret_uri"] = self.key_uri
        return out

    def publish(self, n: int) -> None:
        """Unit ``n`` runs its reconcile: Phase A always, Phase B if it leads."""
        if n == self.impostor:
            self.impostor = None
        data = {**self.units.get(n, {}), **self.phase_a(n)}
        if n == self.leader:
            data.update(self.phase_b())
        self.units[n] = data

    @property
    def valid(self) -> bool:
        """A current, valid logical scaleset: related, with a leader publishing Phase B."""
        if self.relation_id is None or self.leader not in self.units:
            return False
        if self.impostor is not None:
            return False
        return "openstack_auth_url" in self.units[self.leader]

    def wanted(self) -> frozenset[str]:
        return frozenset(normalise_labels((*self.labels, self.logical)))


# --- the garm side -----------------------------------------------------------------------


class Machines:
    """``subprocess.run`` for whichever unit's hook runs: every machine has its own."""

    def __init__(self) -> None:
        self.current = FakeSystemctl()

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.current(cmd, **kwargs)


@dataclasses.dataclass
class GarmUnit:
    """One garm unit: its machine, its chained State, and its own view of each relation.

    ``view`` maps a configurator relation id to the remote units whose ``-joined`` this
    unit has run and not yet departed: Juju's ``relation-list``, not the model.
    """

    id: int
    ctx: testing.Context[GarmCharm]
    paths: workload.Paths
    systemctl: LeasedSystemd
    state: testing.State
    view: dict[int, set[int]] = dataclasses.field(default_factory=dict)
    dying: bool = False
    # Its agent cannot reach the controller: no hook, no tick runs on it (systemd does).
    cut_off: bool = False
    hooks: int = 0  # hooks run so far: none before install

    @property
    def name(self) -> str:
        return f"garm/{self.id}"

    @property
    def runs_garm(self) -> bool:
        """GARM was (re)started on this machine and neither the charm nor its lease stopped it."""
        return self.systemctl.running

    @property
    def has_timer(self) -> bool:
        return self.paths.timer_file.exists()

    @property
    def has_lease(self) -> bool:
        return self.paths.lease_file.exists()


def between_hooks(decorator: Callable[..., Any] = rule, **strategies: Any) -> Callable:
    """``rule`` (or ``initialize``) whose hooks the reconcile timer may fire between.

    juju-exec waits for the machine lock, so the timer's dispatch never runs inside a
    hook but may run between any two: the rule gets a ``data`` draw that ``hook`` uses to
    decide, before each hook, whether the timer fires first, and on which unit.
    """

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def run(self: Lifecycle, timer: st.DataObject, **kwargs: Any) -> Any:
            self.timer = timer
            try:
                return f(self, **kwargs)
            finally:
                self.timer = None

        return decorator(timer=st.data(), **strategies)(run)

    return decorate


class Lifecycle(RuleBasedStateMachine):
    """Garm units, configurator apps and one GARM, and what Juju does to them."""

    def __init__(self, garm: GarmDouble, clock: FakeClock, machines: Machines):
        super().__init__()
        assert garm.unexpected == [], f"routes GARM does not have: {garm.unexpected}"
        # The clock first: GARM counts as started at reset (its consolidation timer).
        clock.now = T0
        garm.reset()
        garm.add_org(ORG)
        self.garm, self.clock, self.machines = garm, clock, machines
        self.root = Path(tempfile.mkdtemp(prefix="garm-lifecycle-"))
        self.resources = self._resources()
        self.apps = {
            "cfg-a": CfgApp("cfg-a", "ci-a", ("linux", "x64"), "1"),
            "cfg-b": CfgApp("cfg-b", "ci-b", ("linux",), "0"),
        }
        self.relation_app: dict[int, CfgApp] = {}
        self.units: dict[int, GarmUnit] = {}
        self.next_garm = 0
        self.config: dict[str, str | int] = {}  # garm's config beyond api-port
        self.next_relation = 10
        self.database = "postgresql"
        self.db_answer: tuple[dict[str, str], list[testing.Secret]] | None = None
        # Invariant bookkeeping.
        self.published: dict[str, set[tuple[str, str]]] = {}
        # Each provider's (username, network) as GARM last started with it.
        self.configured: dict[str, tuple[str, str]] = {}
        # What jobs were served and must stay so: (their org or repo, a label).
        self.guaranteed: set[tuple[str, Entity, str]] = set()  # (application, at, label)
        self.together: dict[str, tuple[Entity, frozenset[str]]] = {}
        self.whole: set[tuple[str, tuple[Entity, frozenset[str]]]] = set()
        # Configurator units a leader's pass read publishing only one of org and repo:
        # garm remembers which they mean, so it must never ask the operator (app, unit),
        # unless both changed between two of its reads (``_note_single_reads``).
        self.read_single: set[tuple[str, int]] = set()
        # The org and repo each unit published when a leader's pass last read it.
        self.last_read: dict[tuple[str, int], tuple[str | None, str | None]] = {}
        self.checked_removals = 0
        self.trail: list[str] = []
        self.healthy = True
        # GARM refusing its setup routes, by what they write, with the status it answers.
        self.setup_refused: dict[str, int] = {}
        # Setup writes GARM refused, as the wire showed them: key -> (digest, in a row, at).
        self.setup_in_a_row: dict[str, tuple[str, int, datetime]] = {}
        # The running rule's draws for the timer between its hooks (``between_hooks``).
        self.timer: st.DataObject | None = None
        self.ticking = False
        # Teardown hooks of a dying unit before its queued timer dispatch runs.
        self.dying_tick: int | None = None

    # --- deployment ---------------------------------------------------------------------

    @between_hooks(
        initialize,
        database=st.sampled_from(("postgresql", "postgresql", "sqlite")),
        units=st.integers(1, MAX_CONFIGURATOR_UNITS),
        labels=st.sampled_from(LABEL_SETS),
        jobs=st.integers(0, 2),
        refused=st.sampled_from((None, "controller", None, "entity", "credential")),
        refused_with=st.sampled_from((400, 500)),
        external_url=st.booleans(),
        apps=st.integers(1, 2),
    )
    def deploy(
        self,
        database: str,
        units: int,
        labels: tuple[str, ...],
        jobs: int,
        refused: str | None,
        refused_with: int,
        external_url: bool,
        apps: int,
    ):
        """garm deployed (two units on PostgreSQL, one on sqlite), then cfg-a integrated;
        half a minute later the leader's timer fires and ``jobs`` jobs start. GARM may
        refuse one kind of setup write from the start (``garm_refuses_setup``). With two
        units the operator may have set ``external-url`` (else the leader asks for it).
        ``apps`` 2 integrates cfg-b too, with one unit."""
        self.database = database
        self.config = {**self._external_url()} if external_url else {}
        if refused is not None:
            self.setup_refused[refused] = refused_with
        for _ in range(2 if database == "postgresql" else 1):
            self._new_unit(leader=not self.units)
        for unit in self.alive():
            self.hook(unit, "install", lambda _: _Event("install"))
        for unit in self.alive():
            kind = "leader_elected" if unit.state.leader else "leader_settings_changed"
            self.hook(unit, kind, lambda _, kind=kind: _Event(kind))
        for kind in ("config_changed", "start"):
            for unit in self.alive():
                self.hook(unit, kind, lambda _, kind=kind: _Event(kind))
        if database == "postgresql":
            self._relate_postgresql()
        self._integrate_at_deploy(labels, units, apps)
        self._first_jobs(jobs)

    def _integrate_at_deploy(self, labels: tuple[str, ...], units: int, apps: int) -> None:
        """cfg-a with ``units`` units (and cfg-b with one) integrated, every unit joined."""
        for name, count in (("cfg-a", units), ("cfg-b", 1))[:apps]:
            app = self.apps[name]
            app.labels = labels
            for _ in range(count):
                self._add_configurator_unit(app)
            self._integrate(app)
            for n in sorted(app.units):
                self._join(app, n)

    def _set_external_url(self) -> None:
        """``juju config garm external-url=…``, as the leader's status asks with 2 units."""
        if "external-url: with " in self.leader().state.unit_status.message:
            COVERAGE["external-url-asked-for"] += 1
        self.config = {**self.config, **self._external_url()}
        for unit in self.alive():
            unit.state = dataclasses.replace(
                unit.state, config={**unit.state.config, **self.config}
            )
            self.hook(unit, "config_changed", lambda _: _Event("config_changed"))

    def _external_url(self) -> dict[str, str | int]:
        """An address that follows the leader (a virtual IP, a DNS name), as config."""
        port = self.garm.url.rsplit(":", 1)[1]
        return {"external-url": f"http://garm.example.internal:{port}"}

    def _first_jobs(self, jobs: int) -> None:
        """Half a minute on, the leader's timer fires and ``jobs`` jobs start."""
        if jobs:
            self.advance(TIMER_INTERVAL)
            self.garm.tick()
            self.tick(self.leader())
            for pick in range(jobs):
                self.jobs(start=True, pick=pick)

    def _new_unit(self, *, leader: bool) -> GarmUnit:
        """A garm unit's machine and its State before its first hook."""
        uid = self.next_garm
        self.next_garm += 1
        relations: list[Any] = [
            testing.PeerRelation(PEERS, id=PEER_ID, peers_data={u: {} for u in self.units})
        ]
        secrets: list[testing.Secret] = []
        if self.db_answer is not None:
            relations.append(self._db_relation_for_new_unit())
            secrets = self.db_answer[1]
        state = make_state(
            self.garm, self.resources, *relations, leader=leader, config=dict(self.config)
        )
        rotated = testing.Secret({"value": ROTATED_KEY}, id=ROTATED_KEY_URI)
        # Each machine its own address: the leader's is where runners reach GARM (no
        # external-url), so a new leader sets the controller's URLs again.
        address = f"10.1.9.{uid + 10}"
        network = testing.Network(
            CONFIGURATOR,
            bind_addresses=[testing.BindAddress([testing.Address(address)])],
            ingress_addresses=[address],
        )
        state = dataclasses.replace(
            state, secrets=[*state.secrets, rotated, *secrets], networks={network}
        )
        unit = GarmUnit(
            id=uid,
            ctx=testing.Context(GarmCharm, unit_id=uid, app_name="garm"),
            paths=workload.Paths(self.root / f"machine-{uid}"),
            systemctl=LeasedSystemd(workload.Paths(self.root / f"machine-{uid}"), self.clock),
            state=state,
        )
        for other in self.alive():
            peer = other.state.get_relation(PEER_ID)
            assert isinstance(peer, testing.PeerRelation)
            peers = {**peer.peers_data, uid: {}}
            self._replace_relation(other, dataclasses.replace(peer, peers_data=peers))
        self.units[uid] = unit
        return unit

    def _relate_postgresql(self) -> None:
        """Integrate postgresql on every unit; its answer, built by the provider's charm."""
        database = testing.Relation("postgresql", remote_app_name="postgresql", id=REL_ID)
        for unit in self.alive():
            unit.state = dataclasses.replace(
                unit.state, relations=[*unit.state.relations, database]
            )
            self.hook(unit, "postgresql-relation-created", lambda s: _created(s, REL_ID))
        request = self.leader().state.get_relation(REL_ID)
        assert isinstance(request, testing.Relation)
        provider = testing.Context(ProviderCharm, meta=PROVIDER_META, config=PROVIDER_CONFIG)
        databag, granted = seen_by_requirer(provider_answers(provider, request, "db:5432"))
        self.db_answer = (databag, sorted(granted, key=lambda s: s.id))
        for unit in self.alive():
            mine = unit.state.get_relation(REL_ID)
            answered = dataclasses.replace(
                mine, remote_app_data=databag, local_app_data=request.local_app_data
            )
            self._replace_relation(unit, answered)
            unit.state = dataclasses.replace(
                unit.state, secrets=[*unit.state.secrets, *self.db_answer[1]]
            )
            self.hook(unit, "postgresql-relation-changed", lambda s: _changed(s, REL_ID, 0))

    def _db_relation_for_new_unit(self) -> testing.Relation:
        assert self.db_answer is not None
        leader = self.leader().state.get_relation(REL_ID)
        return testing.Relation(
            "postgresql",
            remote_app_name="postgresql",
            id=REL_ID,
            remote_app_data=self.db_answer[0],
            local_app_data=leader.local_app_data,
        )

    def _resources(self) -> list[testing.Resource]:
        return [
            testing.Resource(name="garm", path=fake_garm(self.root / "garm")),
            testing.Resource(
                name="garm-provider-openstack",
                path=fake_provider(self.root / "garm-provider-openstack"),
            ),
        ]

    # --- what the configurators do ------------------------------------------------------

    @precondition(lambda self: self._apps(lambda a: a.relation_id is None))
    @between_hooks(pick=st.integers(0, 9))
    def integrate(self, pick: int):
        """``juju integrate garm cfg-x``: relation-created everywhere, joins come later."""
        self._integrate(self._pick(self._apps(lambda a: a.relation_id is None), pick))

    @precondition(lambda self: self._pending())
    @between_hooks(pick=st.integers(0, 99))
    def units_join(self, pick: int):
        """A remote unit enters this relation's scope on every garm unit still lacking it."""
        app, n = self._pick(self._pending(), pick)
        self._join(app, n)

    @precondition(lambda self: self._apps(lambda a: len(a.units) < MAX_CONFIGURATOR_UNITS))
    @rule(pick=st.integers(0, 9), publish=st.booleans())
    def add_configurator_unit(self, pick: int, publish: bool):
        """``juju add-unit cfg-x``: the unit is in the model (and goal-state) before it joins.

        It may join before its first reconcile published anything (only Juju's keys).
        """
        eligible = self._apps(lambda a: len(a.units) < MAX_CONFIGURATOR_UNITS)
        self._add_configurator_unit(self._pick(eligible, pick), publish=publish)

    @precondition(lambda self: self._apps(lambda a: a.emptied))
    @rule(pick=st.integers(0, 9), publish=st.booleans())
    def configurator_scaled_back(self, pick: int, publish: bool):
        """``juju add-unit cfg-x`` on an application scaled to zero while related."""
        emptied = self._apps(lambda a: a.emptied)
        self._add_configurator_unit(self._pick(emptied, pick), publish=publish)

    @precondition(lambda self: self._quiet())
    @between_hooks(pick=st.integers(0, 99))
    def configurator_unit_publishes(self, pick: int):
        """A new configurator unit's first reconcile: relation-changed where it has joined."""
        app, n = self._pick(self._quiet(), pick)
        self._publish(app, n)
        self._changed_everywhere(app, n)

    @precondition(lambda self: self._apps(lambda a: bool(a.units)))
    @between_hooks(pick=st.integers(0, 99), heir=st.integers(0, 9))
    def remove_configurator_unit(self, pick: int, heir: int):
        """``juju remove-unit cfg-x/N``: departed on every garm unit that had it joined."""
        units = [(a, n) for a in self._apps(lambda a: bool(a.units)) for n in sorted(a.units)]
        app, n = self._pick(units, pick)
        del app.units[n]
        app.unseen_moves.discard(n)  # garm no longer serves what it cannot see of it
        if not app.unseen_moves:
            app.known = app.entity
        self.read_single.discard((app.name, n))
        self.last_read.pop((app.name, n), None)
        if app.impostor == n:
            app.impostor = None
        for unit in self.alive():
            if app.relation_id in unit.view and n in unit.view[app.relation_id]:
                self._depart(unit, app.relation_id, n)
        if not app.units:
            app.leader = None
            if app.relation_id is not None:
                COVERAGE["scaled-to-0"] += 1
                app.emptied = True
        elif n == app.leader:
            self._new_configurator_leader(app, self._pick(sorted(app.units), heir))

    @precondition(lambda self: self._apps(lambda a: len(a.units) > 1))
    @between_hooks(pick=st.integers(0, 9), heir=st.integers(0, 9))
    def configurator_leader_changes(self, pick: int, heir: int):
        """The configurator's lease moves: the new leader publishes Phase B, the old keeps its."""
        app = self._pick(self._apps(lambda a: len(a.units) > 1), pick)
        others = sorted(n for n in app.units if n != app.leader)
        self._new_configurator_leader(app, self._pick(others, heir))

    @precondition(lambda self: self._apps(lambda a: bool(a.units)))
    @between_hooks(
        pick=st.integers(0, 9),
        labels=st.sampled_from(LABEL_SETS),
        rename=st.booleans(),
        rotate=st.booleans(),
        new_key=st.booleans(),
        slow_github=st.booleans(),
        move=st.one_of(st.none(), st.none(), st.sampled_from(ENTITIES)),
    )
    def configurator_config_changes(
        self,
        pick: int,
        labels: tuple[str, ...],
        rename: bool,
        rotate: bool,
        new_key: bool,
        slow_github: bool,
        move: tuple[str, str] | None,
    ):
        """``juju config cfg-x``: every unit republishes; relation-changed per unit.

        With ``slow_github`` the replacement it may need is registered on GitHub only at
        GARM's next tick, so what leaves must wait for it. ``rotate`` changes the
        OpenStack settings, ``new_key`` the GitHub App key (its credential is updated),
        ``move`` the org or repo (the key it no longer uses stays in each unit's data).
        """
        app = self._pick(self._apps(lambda a: bool(a.units)), pick)
        app.labels = labels
        if rename:
            app.logical = next(n for n in NAMES[app.name] if n != app.logical)
            COVERAGE["rename"] += 1
        if slow_github:
            self.garm.register_on_create = False
            COVERAGE["change while github is slow"] += 1
        app.rev += rotate
        if new_key:
            app.key_uri = ROTATED_KEY_URI if app.key_uri == KEY_SECRET_URI else KEY_SECRET_URI
            COVERAGE["key-rotated"] += 1
        self._republish(app, move)

    @precondition(lambda self: self._apps(lambda a: bool(a.units)))
    @between_hooks(pick=st.integers(0, 9), to=st.sampled_from(ENTITIES))
    def configurator_moves(self, pick: int, to: tuple[str, str]):
        """``juju config cfg-x org= repo=…`` (or the reverse): only the org or repo."""
        self._republish(self._pick(self._apps(lambda a: bool(a.units)), pick), to)

    def _republish(self, app: CfgApp, move: tuple[str, str] | None) -> None:
        """Every unit publishes its config again; relation-changed per unit."""
        moved = move is not None and move != app.entity
        if move is not None and moved:
            app.entity = move
            COVERAGE["entity-moved"] += 1
        for n in sorted(app.units):
            before = [app.units[n].get(key) for key in ("org", "repo")]
            self._publish(app, n)
            if moved and [app.units[n].get(key) for key in ("org", "repo")] == before:
                app.unseen_moves.add(n)  # back to the value its data still held
            elif moved:
                app.unseen_moves.discard(n)  # this move shows: garm follows it
            if "org" in app.units[n] and "repo" in app.units[n]:
                COVERAGE["both-org-and-repo"] += 1
        if not app.unseen_moves:
            app.known = app.entity
        for n in sorted(app.units):
            self._changed_everywhere(app, n)

    @precondition(lambda self: self._undecided())
    @between_hooks(pick=st.integers(0, 9))
    def operator_chooses_entity(self, pick: int):
        """The operator says which of org and repo a unit means, where garm cannot tell.

        What they see: the unit held with "publishes both" (``juju status``, and garm's
        answer on the relation), or a move of theirs garm could not see.
        """
        app, n = self._pick(self._undecided(), pick)
        self._choose_entity(app, n)

    def _choose_entity(self, app: CfgApp, n: int) -> None:
        unit, kind = self.leader(), app.entity[0]
        params = {"unit": f"{app.name}/{n}", "use": kind}
        self.hook(
            unit, f"choose-entity {params}", lambda _: ON.action("choose-entity", params=params)
        )
        app.unseen_moves.discard(n)
        if not app.unseen_moves:
            app.known = app.entity
        COVERAGE["entity-chosen-by-the-operator"] += 1

    def _undecided(self) -> list[tuple[CfgApp, int]]:
        """Units the operator must speak for: a move garm cannot see, or held for both keys."""
        if len([u for u in self.alive() if u.state.leader]) != 1:
            return []
        out = []
        for app in self.apps.values():
            told = self._told(app)
            # The action names a unit the leader sees (has joined there).
            seen = self.leader().view.get(app.relation_id or -1, set())
            for n in sorted(app.units):
                data = app.units[n]
                if "org" not in data or "repo" not in data or n not in seen:
                    continue
                held = "publishes both" in told.get(f"{app.name}/{n}", "")
                if n in app.unseen_moves or held or self._misread(app, n):
                    out.append((app, n))
        return out

    def _misread(self, app: CfgApp, n: int) -> bool:
        """garm read this unit's latest data and serves the other key: moves undone faster
        than a leader read them (two moves, say, that leave the data as it was). The
        operator sees its runners in the wrong place and says which it means."""
        leader = self.leader()
        memory, _ = entities.read(_peer(leader).local_app_data.get(entities.KEY))
        seen, data = memory.get(f"{app.name}/{n}"), app.units[n]
        return (
            seen is not None
            and seen.use is not None
            and (seen.org, seen.repo) == (data.get("org"), data.get("repo"))
            and (seen.use, seen.value(seen.use)) != app.entity
        )

    def _told(self, app: CfgApp) -> dict[str, str]:
        """What garm's leader last told ``app``'s units (held units: why)."""
        return {unit: state.message or "" for unit, state in self._said(app).items()}

    def _said(self, app: CfgApp) -> dict[str, ScalesetState]:
        """What garm's leader last published for each of ``app``'s units."""
        if app.relation_id is None:
            return {}
        try:
            relation = self.leader().state.get_relation(app.relation_id)
        except (KeyError, ValueError):
            return {}
        return dict(GarmAppData.from_databag(relation.local_app_data).scalesets)

    @precondition(lambda self: self._apps(lambda a: a.relation_id is not None))
    @between_hooks(pick=st.integers(0, 9))
    def remove_relation(self, pick: int):
        """``juju remove-relation``: departed per remote unit, then broken, on every unit."""
        self._remove_relation(self._pick(self._apps(lambda a: a.relation_id is not None), pick))

    def _remove_relation(self, app: CfgApp) -> None:
        rid = app.relation_id
        assert rid is not None
        app.relation_id = None  # the controller's goal: no such relation any more
        app.emptied = False
        self.read_single -= {(app.name, n) for n in app.units}
        for n in app.units:
            self.last_read.pop((app.name, n), None)
        for unit in self.alive():
            for n in sorted(unit.view.get(rid, ())):
                self._depart(unit, rid, n)
            self._break(unit, rid)

    # --- what happens to garm -----------------------------------------------------------

    @precondition(
        lambda self: self.database == "postgresql" and len(self.units) == 2 and not self._cut_off()
    )
    @between_hooks(leader=st.booleans(), dying_tick=st.integers(-1, 6))
    def garm_unit_removed(self, leader: bool, dying_tick: int):
        """``juju remove-unit garm/N`` (mostly the leader): its teardown, then the other leads.

        The dying unit departs every remote unit (itself the departing unit), breaks each
        relation, departs its peers, stops and is removed; the other unit sees nothing
        until it is gone, then its peer departs and, if the leader went, it is elected.
        Before the dying unit's ``dying_tick``-th teardown hook the timer's dispatch,
        queued behind the machine lock, runs on it (-1: none does).
        """
        dying = self.leader() if leader else next(u for u in self.alive() if not u.state.leader)
        (heir,) = [u for u in self.alive() if u is not dying]
        dying.dying = True
        self.dying_tick = dying_tick if dying_tick >= 0 else None
        for rid in sorted(dying.view):
            for n in sorted(dying.view[rid]):
                self._depart(dying, rid, n, itself=True)
            self._break(dying, rid)
        self._self_departs(dying, "postgresql/0", REL_ID, 0)
        self.hook(dying, "postgresql broken", lambda s: _broken(s, REL_ID))
        self._self_departs(dying, heir.name, PEER_ID, heir.id)
        for kind in ("stop", "remove"):
            self.hook(dying, kind, lambda _, kind=kind: _Event(kind))
            COVERAGE[kind] += 1
        self.dying_tick = None
        del self.units[dying.id]
        peer = heir.state.get_relation(PEER_ID)
        assert isinstance(peer, testing.PeerRelation)
        gone = {u: d for u, d in peer.peers_data.items() if u != dying.id}
        self._replace_relation(heir, dataclasses.replace(peer, peers_data=gone))
        self.hook(heir, f"{dying.name} departed", lambda s: _departed(s, PEER_ID, dying.id))
        if leader:
            heir.state = dataclasses.replace(heir.state, leader=True)
            self.hook(heir, "leader_elected", lambda _: _Event("leader_elected"))
            COVERAGE["garm-leader-change"] += 1

    @precondition(
        lambda self: self.database == "postgresql" and len(self.units) == 2 and not self._cut_off()
    )
    @between_hooks(new_first=st.booleans())
    def garm_leadership_moves(self, new_first: bool):
        """The lease moves between live units: leader-elected and leader-settings-changed."""
        old = self.leader()
        (new,) = [u for u in self.alive() if u is not old]
        old.state = dataclasses.replace(old.state, leader=False)
        new.state = dataclasses.replace(new.state, leader=True)
        order = [(new, "leader_elected"), (old, "leader_settings_changed")]
        for unit, kind in order if new_first else order[::-1]:
            self.hook(unit, kind, lambda _, kind=kind: _Event(kind))
        COVERAGE["garm-leader-change"] += 1

    @precondition(lambda self: self._may_cut_off())
    @between_hooks(pace=st.one_of(st.none(), st.integers(10, 180)))
    def garm_leader_cut_off(self, pace: int | None):
        """The leader's machine loses the controller: its lease goes to the other unit,
        which is elected; the old one runs no hook nor tick (its GARM runs on, until its
        lease lapses and systemd stops it) until it reconnects. With a ``pace``, the new
        leader's timer then ticks that many seconds apart (slow ticks: a busy machine
        lock) while the old unit stays silent."""
        new = self._cut_off_leader()
        if pace is not None:
            self._wait_out(new, pace)

    def _may_cut_off(self) -> bool:
        return (
            self.database == "postgresql"
            and len(self.units) == 2
            and not self._cut_off()
            and not any(u.dying for u in self.units.values())
        )

    def _cut_off_leader(self) -> GarmUnit:
        """The leader loses the controller and the other unit is elected; the new leader."""
        old = self.leader()
        (new,) = [u for u in self.alive() if u is not old]
        old.cut_off = True
        old.state = dataclasses.replace(old.state, leader=False)
        new.state = dataclasses.replace(new.state, leader=True)
        self.hook(new, "leader_elected", lambda _: _Event("leader_elected"))
        COVERAGE["garm-leader-cut-off"] += 1
        COVERAGE["garm-leader-change"] += 1
        return new

    @precondition(lambda self: self._cut_off())
    @between_hooks()
    def cut_off_unit_reconnects(self):
        """Its agent is back: the hooks it missed come as one leader-settings-changed; the
        peers hear of what it wrote with a peer -changed."""
        (unit,) = self._cut_off()
        self._reconnect(unit)

    def _reconnect(self, unit: GarmUnit) -> None:
        unit.cut_off = False
        self.hook(unit, "leader_settings_changed", lambda _: _Event("leader_settings_changed"))
        for other in self.alive():
            if other is not unit:
                self.hook(other, "peer changed", lambda s: _changed(s, PEER_ID, unit.id))
        COVERAGE["cut-off-unit-reconnects"] += 1

    def _wait_out(self, leader: GarmUnit, pace: int) -> None:
        """The leader's timer ticks every ``pace`` seconds while the cut-off unit says
        nothing: its GARM stops by its lease, without the agent, and the leader starts
        GARM once the fence has passed (never before: ``one_garm_at_a_time``)."""
        silent = self._silent_records()
        deadline = self.clock.now + timedelta(
            seconds=fence.LONGEST_LEASE if not silent else _fence_wait(leader) + pace
        )
        while not leader.runs_garm and self.clock.now < deadline:
            self.advance(timedelta(seconds=pace))
            self.garm.tick()
            self.tick(leader)
        if silent:
            assert leader.runs_garm, self._explain(f"{leader.name} still fenced at {deadline}")

    def _cut_off(self) -> list[GarmUnit]:
        return [u for u in self.units.values() if u.cut_off]

    @precondition(lambda self: self.database == "postgresql" and len(self.units) == 1)
    @between_hooks()
    def add_garm_unit(self):
        """``juju add-unit garm``: install, relation-created, config, start; joins come later."""
        unit = self._new_unit(leader=False)
        self.hook(unit, "install", lambda _: _Event("install"))
        for rid in sorted(self.relation_app):
            app = self.relation_app[rid]
            if app.relation_id == rid:
                self._create(unit, app)
        self.hook(unit, "postgresql created", lambda s: _created(s, REL_ID))
        for kind in ("leader_settings_changed", "config_changed", "start"):
            self.hook(unit, kind, lambda _, kind=kind: _Event(kind))
        for other in self.alive():
            if other is not unit:
                self.hook(other, "peer joined", lambda s: _joined(s, PEER_ID, unit.id))
                self.hook(other, "peer changed", lambda s: _changed(s, PEER_ID, unit.id))

    @between_hooks()
    def update_status(self):
        for unit in self.alive():
            self.hook(unit, "update_status", lambda _: _Event("update_status"))

    # --- GitHub, GARM's workers and time ------------------------------------------------

    @precondition(
        lambda self: (
            any(self.serves(s) for s in self.garm.scalesets())
            or any(i.get("runner_status") == "active" for i in self.garm.instances())
        )
    )
    @rule(start=st.booleans(), pick=st.integers(0, 99))
    def jobs(self, start: bool, pick: int):
        """GitHub hands a job to a serving scaleset (a busy runner), or a job finishes."""
        if start:
            serving = [s for s in self.garm.scalesets() if self.serves(s)]
            if serving:
                self.garm.add_runner(self._pick(serving, pick)["id"], runner_status="active")
                COVERAGE["job-started"] += 1
            return
        busy = [i for i in self.garm.instances() if i.get("runner_status") == "active"]
        if busy:
            self.garm.finish_job(self._pick(busy, pick)["name"])
            COVERAGE["job-finished"] += 1

    @precondition(lambda self: self._impostors())
    @between_hooks(pick=st.integers(0, 99), victim=st.integers(0, 99))
    def a_leader_names_another_units_provider(self, pick: int, victim: int):
        """A configurator leader publishes OpenStack settings under another unit's provider.

        Its data must be refused; the other unit's provider must stay as that unit made it.
        """
        app, others = self._pick(self._impostors(), pick)
        data = app.units[app.leader]
        app.units[app.leader] = {
            **data,
            "provider_name": self._pick(others, victim),
            "openstack_username": "intruder",
            "openstack_network": "intruder-net",
        }
        app.impostor = app.leader
        # These settings are the leader's own: refused here (this is no cross-model
        # application), they may never reach the named unit's provider.
        self.published.setdefault(app.provider(app.leader), set()).add(
            ("intruder", "intruder-net")
        )
        self._changed_everywhere(app, app.leader)
        COVERAGE["foreign-provider"] += 1

    @precondition(lambda self: self._apps(lambda a: a.impostor is not None))
    @between_hooks(pick=st.integers(0, 9))
    def the_impostor_is_corrected(self, pick: int):
        self._correct(self._pick(self._apps(lambda a: a.impostor is not None), pick))

    def _correct(self, app: CfgApp) -> None:
        """The unit that named another's provider runs its reconcile again."""
        assert app.impostor is not None
        n = app.impostor
        self._publish(app, n)
        self._changed_everywhere(app, n)

    def _impostors(self) -> list[tuple[CfgApp, list[str]]]:
        """Related apps whose leader publishes Phase B, and the providers it could name."""
        providers = [a.provider(n) for a in self.apps.values() for n in a.units]
        return [
            (app, [p for p in providers if p != app.provider(app.leader)])
            for app in self._apps(lambda a: a.valid and len(a.units) + len(providers) > 2)
            if app.leader is not None
        ]

    @rule(what=st.sampled_from(sorted(SETUP_ROUTES)), status=st.sampled_from((400, 500)))
    def garm_refuses_setup(self, what: str, status: int):
        """GARM answers ``status`` to every write of ``what`` from the next hook on: a key
        GitHub rejects, an org the GitHub App cannot see, a database error."""
        self.setup_refused[what] = status

    @precondition(lambda self: self.setup_refused)
    @rule(pick=st.integers(0, 9))
    def garm_accepts_setup(self, pick: int):
        """The cause went away: GARM takes that kind of write again."""
        del self.setup_refused[self._pick(sorted(self.setup_refused), pick)]

    @precondition(lambda self: self.garm.register_on_create)
    @rule()
    def github_slows_down(self):
        """GitHub registers the next new scale sets only at GARM's next tick."""
        self.garm.register_on_create = False
        COVERAGE["github-slow"] += 1

    @rule(minutes=st.sampled_from([0, 5, 45, 180, 480]))
    def garm_works(self, minutes: int):
        """GARM's workers tick (GitHub catches up); time moves, for GARM and the charm."""
        self._github_catches_up()
        self.garm.tick()
        live = self.garm.scalesets()
        retired = {s["id"] for s in live if not s.get("enabled")}
        if minutes and any(
            i["scale_set_id"] in retired and i.get("runner_status") == "active"
            for i in self.garm.instances()
        ):
            COVERAGE["time-passes-on-a-draining-job"] += 1
        self.advance(timedelta(minutes=minutes))

    @precondition(lambda self: self._draining_jobs())
    @between_hooks(
        pick=st.integers(0, 99),
        offset=st.sampled_from(AROUND_THE_DEADLINE),
        job_ended=st.booleans(),
    )
    def drain_deadline_comes(self, pick: int, offset: timedelta, job_ended: bool):
        """Time passes to about the drain deadline of a retired scaleset whose runner
        still has a job, GARM's workers tick, the job perhaps ends just then (unseen, the
        scaleset no longer listens), and the leader's timer fires."""
        name, scaleset_id = self._pick(self._draining_jobs(), pick)
        due = self.garm.disabled_since[scaleset_id] + DRAIN_DEADLINE + offset
        if due > self.clock.now:
            self.advance(due - self.clock.now)
        COVERAGE["time-passes-on-a-draining-job"] += 1
        self.garm.tick()
        if job_ended and name in {i["name"] for i in self.garm.instances()}:
            self.garm.finish_job(name)
            COVERAGE["job-finished"] += 1
        leader = self.leader()
        if leader.hooks:
            self.tick(leader)

    def _draining_jobs(self) -> list[tuple[str, int]]:
        """(runner, scaleset id) of the busy runners of retired scalesets, GARM's order."""
        return [
            (i["name"], i["scale_set_id"])
            for i in self.garm.instances()
            if i.get("status") == "running"
            and i.get("runner_status") == "active"
            and i["scale_set_id"] in self.garm.disabled_since
        ]

    @precondition(lambda self: any(u.hooks for u in self.alive()))
    @rule(pick=st.integers(0, 9))
    def reconcile_timer_fires(self, pick: int):
        """The timer's dispatch runs on a unit: the leader's own timer, or one queued on a
        unit that has lost the lease since (or an operator's juju-exec)."""
        self.tick(self._pick([u for u in self.alive() if u.hooks], pick))

    @precondition(lambda self: any(u.systemctl.requeue_due for u in self.alive()))
    @rule(pick=st.integers(0, 9))
    def requeue_fires(self, pick: int):
        """The extra pass a unit's last pass asked for (``garm.requeue``) comes due: time
        passes to it (GARM ticking) and its transient timer dispatches the tick."""
        unit = self._pick([u for u in self.alive() if u.systemctl.requeue_due], pick)
        due = unit.systemctl.requeue_due
        assert due is not None
        if due > self.clock.now:
            self.advance(due - self.clock.now)
            self.garm.tick()
        assert unit.systemctl.fire_requeue()
        COVERAGE["requeue-fired"] += 1
        self.tick(unit)

    @rule(seconds=st.integers(1, 900))
    def time_passes(self, seconds: int):
        """Seconds to minutes pass, for GARM and the charm; GARM's workers tick."""
        self.advance(timedelta(seconds=seconds))
        self.garm.tick()
        COVERAGE["time-passes"] += 1

    def advance(self, delta: timedelta) -> None:
        """Time passes for every machine: systemd checks each GARM's lease meanwhile."""
        self.clock.advance(delta)
        for unit in self.units.values():
            was = unit.runs_garm
            unit.systemctl.check_lease()
            if was and not unit.runs_garm:
                COVERAGE["lease-stopped-garm"] += 1
        self.one_garm_at_a_time()

    def _github_catches_up(self) -> None:
        self.garm.register_on_create = True
        for scaleset in self.garm.scalesets():
            if not scaleset.get("scale_set_id"):
                self.garm.register(scaleset["id"])

    # --- what must always hold ----------------------------------------------------------

    @invariant()
    def every_invariant(self):
        self.check()
        for unit in self.alive():
            self.timer_only_on_the_leader(unit)
        if sum(1 for a in self.apps.values() if a.valid) == 2:
            COVERAGE["two-apps"] += 1
        COVERAGE["steps checked"] += 1
        # What the invariants had to guard at this step, for the soak report.
        live = self.garm.scalesets()
        COVERAGE["steps with labels guaranteed"] += bool(self.guaranteed)
        COVERAGE["steps with a retired scaleset"] += any(not s.get("enabled") for s in live)
        logical = [t for s in live for t in _tags(s) if t.startswith("ci-")]
        COVERAGE["steps with a changeover"] += len(logical) != len(set(logical))

    def check(self) -> None:
        """The invariants on GARM's ground truth, after every hook and every step."""
        self._taken_over()
        self.one_garm_at_a_time()
        self.takeover_when_nothing_changed()
        self.no_label_gap()
        self.no_valid_scaleset_retired()
        self.no_runner_removed_before_its_deadline()
        self.providers_only_as_their_unit_published()
        self.no_needless_choice()

    def _taken_over(self) -> None:
        """A scaleset left from an earlier relation is the new relation's once garm says
        it serves one of its units with it: a provider name published again with the same
        settings is taken over at once (``garm.providers``); with others, its scalesets
        drain and go first."""
        by_name = {s["name"]: s["id"] for s in self.garm.scalesets()}
        for app in self.apps.values():
            if app.leftover:
                serving = {
                    by_name.get(said.scaleset)
                    for said in self._said(app).values()
                    if said.phase == SERVING
                }
                taken = app.leftover & serving
                COVERAGE["leftover-taken-over"] += len(taken)
                COVERAGE["adoptable-taken-over"] += len(taken & app.adoptable.keys())
                COVERAGE["leftover-drained"] += len(app.leftover - set(by_name.values()))
                app.leftover = (app.leftover & set(by_name.values())) - serving

    def _adoptable(self, app: CfgApp, scaleset: dict[str, Any], earlier: frozenset[str]) -> bool:
        """Whether garm must take ``scaleset``, left from an earlier relation, over for
        ``app``'s new one: it serves exactly what the application asks for, on its
        leader's provider, and every provider of the application's earlier scalesets
        (``earlier``) whose unit publishes one runs in GARM with those settings now (one
        that does not would hold the whole application back while its scalesets drain:
        ``juju.owners``)."""
        published = app.provider_settings()
        leader = app.provider(app.leader) if app.leader is not None else None
        return (
            self.serves(scaleset)
            and scaleset["provider_name"] == leader
            and leader in published
            and _tags(scaleset) == app.wanted()
            and _entity(scaleset) == app.known
            and all(
                self.configured.get(name) == published[name] for name in earlier & published.keys()
            )
        )

    def takeover_when_nothing_changed(self) -> None:
        """A scaleset left from an earlier relation that serves what the new relation
        asks for, with nothing of its providers changed, is taken over, not retired:
        garm's reading of it (``garm.providers``) is checked against GARM's own
        configuration, not against what garm says. It is owed only while the settings
        and what the application asks for are those of the relation's creation, and the
        application is asked for."""
        asked = self._asked()
        by_id = {s["id"]: s for s in self.garm.scalesets()}
        for app in self.apps.values():
            now = app.takeover_basis()
            app.adoptable = {i: was for i, was in app.adoptable.items() if was == now}
            if app.name not in asked:
                continue
            for scaleset_id in app.adoptable:
                scaleset = by_id.get(scaleset_id)
                assert scaleset is not None and self.serves(scaleset), self._explain(
                    f"{app.name}'s scaleset {scaleset_id} retired, though its provider "
                    "runs with the settings the new relation publishes"
                )

    def no_needless_choice(self) -> None:
        """The operator is asked which of org and repo a unit means only where garm
        cannot know: never for a unit a leader read publishing one of them, unless both
        changed between two reads (ADR 0007, 3). Every change is read as it is made by a
        leader that sees the unit; one that no leader sees (the unit has not joined the
        leader yet: the one that read it went, say) is read at the next leader's join,
        two of them as both changed (a move back to the value left behind asks nothing:
        the charm cannot see it)."""
        for app in self.apps.values():
            for unit, message in self._told(app).items():
                n = int(unit.rpartition("/")[2])
                assert "publishes both" not in message or (app.name, n) not in self.read_single, (
                    self._explain(f"{unit} held for both org and repo, though garm read it")
                )

    def no_label_gap(self) -> None:
        """Once a valid spec's labels were all served, each one still asked for stays so.

        Each guarantee is one application's: a label drops out of it only when that
        application's current valid spec no longer asks for it in that org or repo (a
        rename, a relabel, a move to another org or repo, a departure; another
        application asking for the same label holds its own guarantee); a new label set
        is guaranteed once served, by a scaleset garm made for this relation (not one left
        from an earlier one: ``CfgApp.leftover``). Served means by a scaleset that can
        take jobs (enabled and registered on GitHub) of that org or repo: GitHub gives a
        repository's jobs to its own scale sets and to its owner organisation's. Since a
        job needs one runner with all its labels, what an application was served and
        still asks for must stay together on one such scaleset.
        """
        asked = self._asked()
        serving = [
            (s["id"], _entity(s), _tags(s)) for s in self.garm.scalesets() if self.serves(s)
        ]

        def served(
            jobs: Entity, labels: frozenset[str], leftover: frozenset[int] = frozenset()
        ) -> bool:
            return any(
                _takes(runners, jobs) and labels <= tags and id_ not in leftover
                for id_, runners, tags in serving
            )

        # Jobs stay guaranteed while their application still asks for their labels at an
        # org or repo whose runners take them (a repo moving to its owner org keeps its own).
        self.guaranteed = {
            (app, e, label)
            for app, e, label in self.guaranteed
            if app in asked and _takes(asked[app][0], e) and label in asked[app][1]
        }
        lost = {(e, label) for _, e, label in self.guaranteed if not served(e, frozenset({label}))}
        assert not lost, self._explain(f"labels {sorted(lost)} no longer served")
        self.together = {
            app: (e, kept & asked[app][1])
            for app, (e, kept) in self.together.items()
            if app in asked and _takes(asked[app][0], e) and kept & asked[app][1]
        }
        for app, (e, kept) in self.together.items():
            assert served(e, kept), self._explain(
                f"{app}'s labels {sorted(kept)} no longer on one scaleset serving {e}"
            )
        for app, (e, wanted) in asked.items():
            if served(e, wanted, self.apps[app].leftover):
                self.guaranteed |= {(app, e, label) for label in wanted}
                self.together[app] = (e, wanted)

    def no_valid_scaleset_retired(self) -> None:
        """A valid, unchanged spec whose exact scaleset served keeps an enabled one.

        Retiring is only right for a changeover (its labels, name, provider, org or repo
        changed, and then a replacement with the same labels serves first) or when the
        spec is no longer valid (related, with a leader publishing Phase B). A scaleset left
        from an earlier relation (``CfgApp.leftover``) is not the spec's: it retires.
        """
        asked = self._asked()
        self.whole = {(app, want) for app, want in self.whole if asked.get(app) == want}
        live = self.garm.scalesets()
        for app, (entity, wanted) in asked.items():
            exact = [
                s
                for s in live
                if self.serves(s)
                and _tags(s) == wanted
                and _entity(s) == entity
                and s["id"] not in self.apps[app].leftover
            ]
            if (app, (entity, wanted)) in self.whole:
                assert exact, self._explain(f"{app}'s scaleset {sorted(wanted)} retired")
            elif exact:
                self.whole.add((app, (entity, wanted)))

    def no_runner_removed_before_its_deadline(self) -> None:
        """Every runner removal waits out the drain deadline since its scaleset's retirement.

        Both records must agree: GARM's (since the scaleset was disabled) and the charm's
        (the ``retired-at=`` stamp it wrote).
        """
        by_id = {s["id"]: s for s in self.garm.scalesets()}
        for name, scaleset_id, at, force in self.garm.removals[self.checked_removals :]:
            since = self.garm.disabled_since.get(scaleset_id)
            what = f"runner {name} ({'forced' if force else 'plain'}) removed"
            assert since is not None, self._explain(f"{what} from an enabled scaleset")
            assert at - since >= DRAIN_DEADLINE, self._explain(f"{what} {at - since} after")
            stamp = Notes.read(by_id.get(scaleset_id, {}).get("extended_state", "")).retired_at
            assert stamp is not None, self._explain(f"{what}: scaleset has no retired-at stamp")
            assert at >= stamp + DRAIN_DEADLINE, self._explain(
                f"{what} before the charm's own deadline (stamped {stamp})"
            )
            COVERAGE["runner-force-removed"] += force
        self.checked_removals = len(self.garm.removals)

    def providers_only_as_their_unit_published(self) -> None:
        """``providers/<name>.*`` hold only what unit ``<name>`` itself published."""
        for unit in self.alive():
            for name, settings_ in _provider_files(unit.paths):
                published = self.published.get(name, set())
                assert settings_ in published, self._explain(
                    f"{unit.name} holds provider {name} as {settings_}; "
                    f"that unit published {sorted(published)}"
                )

    def teardown(self):
        """Every story ends settled: all joined, jobs done, the leader converged."""
        try:
            if self.healthy:
                self.settle()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def settle(self) -> None:
        for unit in self._cut_off():
            self._reconnect(unit)
        self._every_cause_goes()
        # Every job ends at last. GitHub refuses to remove a runner while its job runs,
        # so a job past the drain deadline is what held its scaleset; once it ends,
        # GARM's consolidation (a retired scaleset hears nothing) reaps the runner.
        for instance in self.garm.instances():
            if instance.get("runner_status") == "active":
                self.garm.finish_job(instance["name"])
        leader = self.leader()
        expected = self._expected_status()
        deadline = self.clock.now + SETTLE_WITHIN
        wait, quiet = TIMER_INTERVAL, 0
        while quiet < 2:
            assert self.clock.now < deadline, self._explain(
                f"not settled within {SETTLE_WITHIN}: {leader.state.unit_status!r}, "
                f"expected {expected!r}"
            )
            self.advance(wait)
            self.garm.tick()
            writes = len(self.garm.writes())
            if leader.has_timer:
                self.tick(leader)
            else:
                self.hook(leader, "update_status", lambda _: _Event("update_status"))
            wrote = len(self.garm.writes()) > writes
            for app, n in self._undecided():  # held for both keys since it joined late
                self._choose_entity(app, n)
            settled = not wrote and leader.state.unit_status == expected
            quiet = quiet + 1 if settled else 0
            wait = TIMER_INTERVAL if wrote or settled else min(wait * 2, LONGEST_WAIT)
        self._each_app_served()

    def _every_cause_goes(self) -> None:
        """What keeps a story from settling is put right, as an operator would."""
        self.setup_refused.clear()
        if len(self.alive()) > 1 and "external-url" not in self.config:
            self._set_external_url()
        for app in self._apps(lambda a: a.impostor is not None):
            self._correct(app)
        for app, n in self._quiet():
            self._publish(app, n)
            self._changed_everywhere(app, n)
        for app, n in self._pending():
            self._join(app, n)
        for app, n in self._undecided():
            self._choose_entity(app, n)
        self._github_catches_up()

    def _each_app_served(self) -> None:
        for app in self.apps.values():
            if app.valid:
                COVERAGE["settled-following-a-move-it-read"] += any(
                    "org" in data and "repo" in data and (app.name, n) in self.read_single
                    for n, data in app.units.items()
                )
                assert any(
                    self.serves(s) and _tags(s) == app.wanted() and _entity(s) == app.entity
                    for s in self.garm.scalesets()
                ), self._explain(f"{app.name} settled without its scaleset in {app.entity}")

    # --- running hooks ------------------------------------------------------------------

    def hook(
        self,
        unit: GarmUnit,
        what: str,
        event: Callable[[testing.State], Any],
    ) -> None:
        """Run one hook on ``unit`` as Juju would, then check the invariants.

        The unit's relations show its own view with the data published now; goal-state
        answers what the controller holds; the unit's machine is the one the charm sees.
        """
        if unit.cut_off:
            COVERAGE["hooks missed (cut off)"] += 1
            return
        if self.timer is not None and not self.ticking:
            self._timer_between_hooks()
        if unit.dying and self.dying_tick is not None and not self.ticking:
            self._dying_unit_ticks(unit)
        self.healthy = False
        self._refresh(unit)
        GarmCharm.paths = unit.paths
        self.machines.current = unit.systemctl
        unit.systemctl.goal_state = self._goal_state()
        writes, calls = len(self.garm.writes()), len(unit.systemctl.calls)
        requests = len(self.garm.requests)
        waiting, now = self._waiting(unit), self.clock.now
        self.trail.append(f"{unit.name}{' (dying)' if unit.dying else ''}: {what}")
        COVERAGE["hooks run"] += 1
        for kind, status in self.setup_refused.items():
            for method, route in SETUP_ROUTES[kind]:
                self.garm.inject(method, route, status=status, error=f"{kind} refused", times=99)
        owned = _app_secrets(unit.state)
        try:
            unit.state = unit.ctx.run(event(unit.state), unit.state)
        finally:
            self.garm.clear_faults()
        self.lease_outlasts_the_next_pass(unit, self.clock.now)
        self._only_a_leader_writes_app_secrets(unit, owned, what)
        self.advance(HOOK_TAKES)
        unit.hooks += 1
        if unit.dying:
            made = [f"{w.method} {w.path}" for w in self.garm.writes()[writes:]]
            assert not made, self._explain(f"dying {unit.name} wrote {made} in {what}")
        if ["restart", "garm"] in unit.systemctl.calls[calls:]:
            self.garm.set_providers(_configured_providers(unit.paths))
            self.configured = dict(_provider_files(unit.paths))
        self.nothing_resent_before_its_backoff(waiting, self.garm.requests[requests:], what)
        self.setup_waits_out_its_backoff(unit, self.garm.requests[requests:], now, what)
        self._share_app_data(unit)
        if unit.state.leader and unit.state.unit_status.message.startswith("Waiting for garm/"):
            COVERAGE["fence-waited"] += 1
        if unit.state.leader and unit.runs_garm and self._silent_records():
            COVERAGE["fence-waited-out-a-silent-unit"] += 1
        self.timer_only_on_the_leader(unit)
        self._note_single_reads(unit, what)
        self.check()
        self.healthy = True

    def _waiting(self, unit: GarmUnit) -> dict[str, datetime]:
        """What GARM refused and must not be asked yet as a hook starts, as the
        application's peer data remembers it (``garm.refusals``): the delete of a
        scaleset GARM kept, the removal of runners GitHub would not let go, each until
        its retry time."""
        now, out = self.clock.now, {}
        memory = Refusals()
        for relation in unit.state.relations:
            if isinstance(relation, testing.PeerRelation):
                memory = Refusals.read(relation.local_app_data.get("refusals"))
        runners = self.garm.instances()
        for scaleset in self.garm.scalesets():
            name = scaleset["name"].lower()
            kept = memory.holding(f"delete:{name}", "", now)
            if kept is not None:
                out[f"/scalesets/{scaleset['id']}"] = kept.retry_at
            for runner in runners:
                refused = memory.holding(f"remove:{name}:{runner['name']}", "", now)
                if runner["scale_set_id"] == scaleset["id"] and refused is not None:
                    out[f"/instances/{runner['name']}"] = refused.retry_at
        return out

    def nothing_resent_before_its_backoff(
        self, waiting: dict[str, datetime], sent: list[Any], what: str
    ) -> None:
        """No hook deletes a scaleset or force-removes its runners before the retry time
        remembered for it: the back-off holds across hooks, timer ticks and leaders."""
        for request in sent:
            if request.method != "DELETE":
                continue
            path = request.path.rstrip("/")
            assert path not in waiting, self._explain(
                f"{what}: DELETE {path} before its retry-at {waiting[path]}"
            )
            if path.startswith("/instances/"):
                COVERAGE["removal-refused(job-running)"] += request.status == 400

    def setup_waits_out_its_backoff(
        self, unit: GarmUnit, sent: list[Recorded], now: datetime, what: str
    ) -> None:
        """A setup write GARM refused is not sent again, the same, before its back-off is
        over (across hooks and leaders); one refused for good (a 4xx), or
        ``REFUSALS_BEFORE_BLOCKED`` times in a row, leaves the leader ``blocked``.

        Counted on the wire, by what each request writes: not from the charm's memory. A
        refusal nobody renewed for the longest back-off after its retry is of a write
        nobody asks for any more, and its count starts again (``Refusals.current``)."""
        self.setup_in_a_row = {
            key: (asked, count, at)
            for key, (asked, count, at) in self.setup_in_a_row.items()
            if now - (at + backoff(count)) <= LONGEST_RETRY
        }
        due: list[str] = []
        for request in sent:
            written = self._setup_write_of(request)
            if written is None or request.status is None:
                continue
            key, asked = written
            earlier, count, at = self.setup_in_a_row.get(key, ("", 0, now))
            if earlier == asked:
                assert now >= at + backoff(count), self._explain(
                    f"{what}: {request.method} {request.path} again before its back-off "
                    f"({count} refusals, the last at {at})"
                )
                COVERAGE["setup-retried-after-backoff"] += 1
            if request.status < 400:
                self.setup_in_a_row.pop(key, None)
                continue
            count = count + 1 if earlier == asked else 1
            self.setup_in_a_row[key] = (asked, count, now)
            COVERAGE[f"setup-refused({key.split(':')[0]})"] += 1
            if is_permanent(request.status) or count >= REFUSALS_BEFORE_BLOCKED:
                due.append(key)
        if due:
            assert isinstance(unit.state.unit_status, ops.BlockedStatus), self._explain(
                f"{what}: GARM refused {due}, yet {unit.name} says {unit.state.unit_status!r}"
            )
            COVERAGE["setup-refusal-blocked"] += 1

    def _setup_write_of(self, request: Recorded) -> tuple[str, str] | None:
        """What a setup request writes, as the memory of refusals keys it, and a digest
        of what it asks: a credential's description (the key's fingerprint), an
        organisation's or repository's credential, the controller's URLs. None for any
        other request."""
        path = request.path.rstrip("/")
        body = request.body if isinstance(request.body, dict) else {}
        if request.method == "PUT" and path == "/controller":
            return "controller", digest(body)
        if path == "/github/credentials" and request.method == "POST":
            return f"credential:{body.get('name', '')}", digest(body.get("description", ""))
        if (found := re.fullmatch(r"/github/credentials/(\d+)", path)) and request.method == "PUT":
            names = {c["id"]: c["name"] for c in self.garm.credentials()}
            name = names.get(int(found[1]), "")
            return f"credential:{name}", digest(body.get("description", ""))
        if path == "/organizations" and request.method == "POST":
            name = str(body.get("name", "")).lower()
            return f"entity:organization:{name}", digest(body.get("credentials_name", ""))
        if (found := re.fullmatch(r"/organizations/([^/]+)", path)) and request.method == "PUT":
            names = {e["id"]: e["name"] for e in self.garm.entities()}
            name = names.get(found[1], "").lower()
            return f"entity:organization:{name}", digest(body.get("credentials_name", ""))
        if path == "/repositories" and request.method == "POST":
            name = f"{body.get('owner', '')}/{body.get('name', '')}".lower()
            return f"entity:repository:{name}", digest(body.get("credentials_name", ""))
        if (found := re.fullmatch(r"/repositories/([^/]+)", path)) and request.method == "PUT":
            repos = {e["id"]: f"{e['owner']}/{e['name']}" for e in self.garm.entities()}
            name = repos.get(found[1], "").lower()
            return f"entity:repository:{name}", digest(body.get("credentials_name", ""))
        return None

    def _timer_between_hooks(self) -> None:
        """Perhaps the reconcile timer's dispatch runs now, on some unit, before the hook."""
        assert self.timer is not None
        if self.timer.draw(st.integers(0, TIMER_ODDS), label="timer fires") != 0:
            return
        units = [u for u in self.alive() if u.hooks]
        if not units:
            return
        unit = self._pick(units, self.timer.draw(st.integers(0, 9), label="on unit"))
        self.ticking = True
        try:
            self.tick(unit)
        finally:
            self.ticking = False
        COVERAGE["timer-between-hooks"] += 1

    def _dying_unit_ticks(self, unit: GarmUnit) -> None:
        """Count down to the dying unit's queued timer dispatch; run it when due."""
        assert self.dying_tick is not None
        if self.dying_tick:
            self.dying_tick -= 1
            return
        self.dying_tick = None
        self.ticking = True
        try:
            self.tick(unit)
        finally:
            self.ticking = False

    def tick(self, unit: GarmUnit) -> None:
        """The timer's juju-exec dispatch (``reconcile-tick``) runs on ``unit``.

        On the live leader it is a pass like any hook's. On a non-leader (its lease moved
        since the dispatch was queued, or an operator ran it) or a dying unit it changes
        nothing: no request to GARM, no relation data, no GARM configuration; it may only
        take this unit's own timer (and a GARM it should no longer run) away.
        """
        if unit.cut_off:  # juju-exec cannot reach the agent: no hook runs
            return
        role = "dying" if unit.dying else "leader" if unit.state.leader else "non-leader"
        COVERAGE[f"timer({role})"] += 1
        before, requests = self._unit_snapshot(unit), len(self.garm.requests)
        had_record = fence.RECORD_KEY in _peer(unit).local_unit_data
        self.hook(unit, "reconcile-tick (timer)", lambda _: reconcile_tick())
        if role == "leader":
            return
        sent = [f"{r.method} {r.path}" for r in self.garm.requests[requests:]]
        assert not sent, self._explain(f"{role} {unit.name}'s timer tick sent {sent}")
        has_record = fence.RECORD_KEY in _peer(unit).local_unit_data
        assert had_record or not has_record, self._explain(f"{role} {unit.name} said GARM runs")
        after = self._unit_snapshot(unit)
        for what, was in before.items():
            assert after[what] == was, self._explain(
                f"{role} {unit.name}'s timer tick changed its {what}"
            )
        if unit.dying:
            assert unit.state.unit_status == ops.MaintenanceStatus(BEING_REMOVED), self._explain(
                f"dying {unit.name} says {unit.state.unit_status!r}"
            )

    @staticmethod
    def _unit_snapshot(unit: GarmUnit) -> dict[str, Any]:
        """What a tick on a non-leader or dying unit may not change."""
        # Its own garm-running record it may take away (its GARM stopped), never add.
        relations = {
            r.id: (
                dict(r.local_app_data),
                {k: v for k, v in r.local_unit_data.items() if k != fence.RECORD_KEY},
            )
            for r in unit.state.relations
        }
        config = unit.paths.config_dir
        files = (
            {str(p): p.read_bytes() for p in sorted(config.rglob("*")) if p.is_file()}
            if config.is_dir()
            else {}
        )
        return {"relation data": relations, "GARM configuration": files}

    def _silent_records(self) -> list[str]:
        """Cut-off units whose record still says GARM may run there."""
        return [
            u.name
            for u in self.units.values()
            if u.cut_off and fence.RECORD_KEY in _peer(u).local_unit_data
        ]

    def one_garm_at_a_time(self) -> None:
        """Never two GARMs running on one database: each would delete the other's runners."""
        running = [u.name for u in self.units.values() if u.runs_garm]
        assert len(running) <= 1, self._explain(f"GARM runs on {running} at once")

    def timer_only_on_the_leader(self, unit: GarmUnit) -> None:
        """Only the live leader has the reconcile timer, and it has it once GARM runs.

        Checked on a unit after its own hook: one whose lease just moved has not been
        told yet.
        """
        if unit.cut_off:
            return
        role = "dying" if unit.dying else "non-leader"
        if unit.dying or not unit.state.leader:
            assert unit.systemctl.requeue_due is None, self._explain(
                f"{role} {unit.name} keeps a requeue"
            )
        # A dying leader serves on until its stop hook (Juju lets no other unit lead
        # meanwhile): the timer that renews its lease goes on while it holds one.
        serving_on = unit.dying and unit.state.leader and unit.has_lease
        if (unit.dying and not serving_on) or not unit.state.leader:
            assert not unit.has_timer, self._explain(f"{role} {unit.name} keeps the timer")
        elif unit.runs_garm and (unit.has_lease or self.config.get("reconcile-interval") != 0):
            # reconcile-interval 0 takes the timer away, but for the one renewing a lease.
            assert unit.has_timer, self._explain(f"leader {unit.name} runs GARM, no timer")

    def lease_outlasts_the_next_pass(self, unit: GarmUnit, ended: datetime) -> None:
        """The lease a leader just took outlasts the moment its timer runs the next pass.

        ``ended`` is when the hook ended: the timer counts its interval from a run's end.
        """
        if unit.cut_off or not unit.state.leader or not unit.runs_garm:
            return
        deadline = workload.read_text(unit.paths.lease_file)
        if deadline is None:
            return  # no lease: sqlite, whose GARM no other unit can share
        COVERAGE["lease-checked-against-the-next-pass"] += 1
        assert unit.has_timer, self._explain(f"leader {unit.name} holds a lease and no timer")
        timer_unit = unit.paths.timer_file.read_text()
        (interval,) = re.findall(r"^OnUnitInactiveSec=(\d+)s$", timer_unit, re.MULTILINE)
        due = ended + timedelta(seconds=int(interval))
        lapses = datetime.fromtimestamp(int(deadline), UTC)
        assert lapses > due, self._explain(
            f"leader {unit.name}'s lease lapses at {lapses}, before its next pass at {due}"
        )

    def _refresh(self, unit: GarmUnit) -> None:
        """The configurator relations as this unit sees them: its members, their data now."""
        relations = []
        for relation in unit.state.relations:
            if relation.endpoint == CONFIGURATOR:
                app = self.relation_app[relation.id]
                members = sorted(unit.view.get(relation.id, ()))
                data = {n: dict(app.units[n]) for n in members if n in app.units}
                relation = dataclasses.replace(relation, remote_units_data=data)
            relations.append(relation)
        unit.state = dataclasses.replace(unit.state, relations=relations)

    def _goal_state(self) -> dict[str, Any]:
        """What ``goal-state`` answers now: the controller's model, not a unit's view."""
        configurator: dict[str, Any] = {}
        for app in self.apps.values():
            if app.relation_id is not None:
                configurator[app.name] = goal("joined")
                configurator.update({f"{app.name}/{n}": goal("joined") for n in app.units})
        relations: dict[str, Any] = {CONFIGURATOR: configurator} if configurator else {}
        if self.database == "postgresql":
            relations["postgresql"] = {
                "postgresql": goal("joined"),
                "postgresql/0": goal("joined"),
            }
        units = {u.name: goal("dying" if u.dying else "active") for u in self.alive()}
        return {"units": units, "relations": relations}

    def _note_single_reads(self, unit: GarmUnit, what: str) -> None:
        """Which units a leader's pass just read publishing one of org and repo, and
        which it read with both changed since its last read of them: org and repo each
        changed where no leader saw it (the unit joined the leader only now), in an
        order no reader can tell, so garm cannot know either (``entities._take``)."""
        if not unit.state.leader or unit.dying or what in NO_PASS:
            return
        for app in self.apps.values():
            for n in unit.view.get(app.relation_id, ()) if app.relation_id is not None else ():
                data = app.units.get(n, {})
                now = (data.get("org"), data.get("repo"))
                before = self.last_read.get((app.name, n))
                if before is not None and now[0] != before[0] and now[1] != before[1]:
                    if (app.name, n) in self.read_single:
                        COVERAGE["both-changed-between-reads"] += 1
                    self.read_single.discard((app.name, n))
                if ("org" in data) != ("repo" in data):
                    self.read_single.add((app.name, n))
                self.last_read[(app.name, n)] = now

    def _only_a_leader_writes_app_secrets(
        self, unit: GarmUnit, before: dict[str, Any], what: str
    ) -> None:
        """Juju lets only the leader add or change its application's secrets; ops.testing
        does not check it, and ``_share_app_data`` would hide a non-leader's."""
        if not unit.state.leader:
            after = _app_secrets(unit.state)
            assert after == before, self._explain(f"{unit.name} changed app secrets in {what}")

    def _share_app_data(self, unit: GarmUnit) -> None:
        """Juju propagates app data and the application's own secrets from the leader
        (every unit of the application reads their latest revision), and unit data to
        the peers."""
        owned = [s for s in unit.state.secrets if s.owner == "app"]
        for other in self.alive():
            if other is unit:
                continue
            if unit.state.leader:
                theirs = [s for s in other.state.secrets if s.owner != "app"]
                other.state = dataclasses.replace(other.state, secrets=[*theirs, *owned])
            for relation in unit.state.relations:
                try:
                    theirs = other.state.get_relation(relation.id)
                except KeyError:
                    continue
                if unit.state.leader:
                    theirs = dataclasses.replace(theirs, local_app_data=relation.local_app_data)
                if isinstance(relation, testing.PeerRelation):
                    assert isinstance(theirs, testing.PeerRelation)
                    peers = {**theirs.peers_data, unit.id: relation.local_unit_data}
                    theirs = dataclasses.replace(theirs, peers_data=peers)
                self._replace_relation(other, theirs)

    def _replace_relation(self, unit: GarmUnit, new: Any) -> None:
        relations = [new if r.id == new.id else r for r in unit.state.relations]
        unit.state = dataclasses.replace(unit.state, relations=relations)

    # --- relation verbs, one hook each --------------------------------------------------

    def _integrate(self, app: CfgApp) -> None:
        # A new relation's databags start empty, and the configurator writes to none
        # while it has no relation: what its units publish is what they use now.
        unused = "repo" if app.entity[0] == "org" else "org"
        for data in app.units.values():
            data.pop(unused, None)
        app.unseen_moves.clear()
        app.known = app.entity
        mine = [s for s in self.garm.scalesets() if s["provider_name"] in app.providers()]
        app.leftover = frozenset(s["id"] for s in mine)
        earlier = frozenset(s["provider_name"] for s in mine)
        app.adoptable = {
            s["id"]: app.takeover_basis() for s in mine if self._adoptable(app, s, earlier)
        }
        rid = app.relation_id = self.next_relation
        self.next_relation += 1
        self.relation_app[rid] = app
        app.emptied = False
        for unit in self.alive():
            self._create(unit, app)

    def _create(self, unit: GarmUnit, app: CfgApp) -> None:
        rid = app.relation_id
        assert rid is not None
        relation = testing.Relation(
            CONFIGURATOR, remote_app_name=app.name, id=rid, remote_units_data={}
        )
        unit.state = dataclasses.replace(unit.state, relations=[*unit.state.relations, relation])
        unit.view[rid] = set()
        self.hook(unit, f"{app.name} created", lambda s: _created(s, rid))
        COVERAGE["created-before-joined"] += 1

    def _join(self, app: CfgApp, n: int) -> None:
        rid = app.relation_id
        assert rid is not None
        for unit in self.alive():
            if rid in unit.view and n not in unit.view[rid] and n in app.units:
                unit.view[rid].add(n)
                self.hook(unit, f"{app.name}/{n} joined", lambda s: _joined(s, rid, n))
                self.hook(unit, f"{app.name}/{n} changed", lambda s: _changed(s, rid, n))
                COVERAGE["joined"] += 1

    def _depart(self, unit: GarmUnit, rid: int, n: int, *, itself: bool = False) -> None:
        """Remote unit ``n`` leaves ``unit``'s view: it departs, or ``unit`` itself does."""
        unit.view[rid].discard(n)
        remote = f"{self.relation_app[rid].name}/{n}"
        if itself:
            self._self_departs(unit, remote, rid, n)
            COVERAGE["garm-dying(self-departing)"] += 1
            return
        self.hook(unit, f"{remote} departed", lambda s: _departed(s, rid, n))
        COVERAGE["departed"] += 1

    def _self_departs(self, unit: GarmUnit, remote: str, rid: int, n: int) -> None:
        """relation-departed on a dying unit: JUJU_DEPARTING_UNIT is the unit itself."""
        with self_departing(unit.name):
            what = f"{remote} departed (departing {unit.name})"
            self.hook(unit, what, lambda s: _departed(s, rid, n))

    def _break(self, unit: GarmUnit, rid: int) -> None:
        self.hook(unit, f"{self.relation_app[rid].name} broken", lambda s: _broken(s, rid))
        unit.state = dataclasses.replace(
            unit.state, relations=[r for r in unit.state.relations if r.id != rid]
        )
        unit.view.pop(rid, None)
        COVERAGE["broken"] += 1

    def _changed_everywhere(self, app: CfgApp, n: int) -> None:
        rid = app.relation_id
        if rid is None:
            return
        for unit in self.alive():
            if rid in unit.view and n in unit.view[rid]:
                self.hook(unit, f"{app.name}/{n} changed", lambda s: _changed(s, rid, n))

    def _add_configurator_unit(self, app: CfgApp, *, publish: bool = True) -> None:
        n = app.next_unit
        app.next_unit += 1
        if app.leader is None:
            app.leader = n
            if app.emptied:
                COVERAGE["scaled-back"] += 1
                app.emptied = False
        if publish:
            self._publish(app, n)
        else:
            app.units[n] = {"ingress-address": f"10.1.2.{n + 10}"}

    def _new_configurator_leader(self, app: CfgApp, n: int) -> None:
        app.leader = n
        self._publish(app, n)
        self._changed_everywhere(app, n)
        COVERAGE["cfg-leader-change"] += 1

    def _publish(self, app: CfgApp, n: int) -> None:
        app.publish(n)
        if n == app.leader:
            data = app.units[n]
            settings_ = (data["openstack_username"], data["openstack_network"])
            self.published.setdefault(app.provider(n), set()).add(settings_)

    # --- looking at the world -----------------------------------------------------------

    def serves(self, scaleset: dict[str, Any]) -> bool:
        """Can be handed jobs now: enabled, registered on GitHub and its listener open
        (GARM opens it seconds after the create, re-enable or registration)."""
        return self.garm.listening(scaleset["id"])

    def alive(self) -> list[GarmUnit]:
        return [self.units[u] for u in sorted(self.units)]

    def leader(self) -> GarmUnit:
        (leader,) = [u for u in self.alive() if u.state.leader]
        return leader

    def _apps(self, keep: Callable[[CfgApp], bool]) -> list[CfgApp]:
        return [a for a in self.apps.values() if keep(a)]

    def _quiet(self) -> list[tuple[CfgApp, int]]:
        """Configurator units that have not published their scaleset yet."""
        return [
            (a, n) for a in self.apps.values() for n in sorted(a.units) if "name" not in a.units[n]
        ]

    def _pending(self) -> list[tuple[CfgApp, int]]:
        """Units in the model and the relation that some live garm unit has not joined."""
        out = []
        for app in self.apps.values():
            rid = app.relation_id
            for n in sorted(app.units):
                if any(rid in u.view and n not in u.view[rid] for u in self.alive()):
                    out.append((app, n))
        return out

    def _asked(self) -> dict[str, tuple[Entity, frozenset[str]]]:
        """Each valid application's org or repo, and the labels its jobs use.

        Not while garm asks the operator which of org and repo one of its units means:
        garm cannot serve what it cannot know (``no_needless_choice`` holds it to asking
        only then). What it asks for is the org or repo garm can know (``CfgApp.known``):
        a move back to the value its data still held shows nothing (ADR 0007), so until
        the operator says it, the unit still asks for what garm read; the scaleset left
        serving where the unit has moved back to is on its way out, not a guarantee.
        """
        return {
            a.name: (a.known, a.wanted())
            for a in self.apps.values()
            if a.valid and not any("publishes both" in m for m in self._told(a).values())
        }

    def _expected_status(self) -> ops.StatusBase:
        if not self._apps(lambda a: a.relation_id is not None):
            return ops.BlockedStatus(
                "Integrate with garm-configurator: juju integrate garm garm-configurator"
            )
        count = len(self._apps(lambda a: a.valid))
        return ops.ActiveStatus(f"{count} scaleset{'' if count == 1 else 's'} in sync")

    @staticmethod
    def _pick(options: list[Any], index: int) -> Any:
        return options[index % len(options)]

    def _explain(self, message: str) -> str:
        hooks = "\n  ".join(self.trail[-25:])
        live = "\n  ".join(
            f"{s['id']}: {s['name']} enabled={s.get('enabled', False)} "
            f"provider={s['provider_name']} in={'/'.join(_entity(s))} "
            f"tags={sorted(_tags(s))} state={s.get('extended_state', '')!r} "
            f"listening={self.garm.listening(s['id'])} gh={s.get('scale_set_id')}"
            for s in self.garm.scalesets()
        )
        runners = "\n  ".join(
            f"{i['name']} of {i['scale_set_id']}: {i.get('status')}/{i.get('runner_status')}"
            for i in self.garm.instances()
        )
        return (
            f"{message}\nat {self.clock.now}, last hooks:\n  {hooks}\n"
            f"GARM's scalesets:\n  {live}\nGARM's runners:\n  {runners}"
        )


# --- small helpers ---------------------------------------------------------------------


ON = testing.CharmEvents()


def _entity(scaleset: dict[str, Any]) -> Entity:
    """The org or repo a scaleset of GARM's registers its runners at."""
    if scaleset.get("org_name"):
        return ("org", scaleset["org_name"])
    return ("repo", scaleset.get("repo_name", ""))


def _takes(runners: Entity, jobs: Entity) -> bool:
    """Whether GitHub gives jobs of ``jobs`` to runners registered at ``runners``: its
    own, and a repository's to its owner organisation's too."""
    if runners == jobs:
        return True
    return runners[0] == "org" and jobs[0] == "repo" and jobs[1].split("/")[0] == runners[1]


def _created(state: testing.State, rid: int) -> Any:
    return ON.relation_created(_rel(state, rid))


def _joined(state: testing.State, rid: int, n: int) -> Any:
    return ON.relation_joined(_rel(state, rid), remote_unit=n)


def _fence_wait(unit: GarmUnit) -> int:
    """The longest a leader waits for a silent unit (``juju.fence``), from its config."""
    lease = fence.lease_seconds(int(unit.state.config.get("reconcile-interval", 30)))
    return lease + fence.CHECK_SECONDS + fence.MARGIN_SECONDS


def _peer(unit: GarmUnit) -> testing.PeerRelation:
    relation = unit.state.get_relation(PEER_ID)
    assert isinstance(relation, testing.PeerRelation)
    return relation


def _changed(state: testing.State, rid: int, n: int) -> Any:
    return ON.relation_changed(_rel(state, rid), remote_unit=n)


def _departed(state: testing.State, rid: int, n: int) -> Any:
    """Remote unit ``n`` departs; the departing unit is ``n`` unless self-departing is set."""
    return ON.relation_departed(_rel(state, rid), remote_unit=n, departing_unit=n)


def _broken(state: testing.State, rid: int) -> Any:
    return ON.relation_broken(_rel(state, rid))


def _rel(state: testing.State, rid: int) -> Any:
    return state.get_relation(rid)


def _tags(scaleset: dict[str, Any]) -> frozenset[str]:
    return frozenset(t["name"].lower() for t in scaleset.get("tags", []))


def _app_secrets(state: testing.State) -> dict[str, Any]:
    """The application's own secrets as a writer leaves them: each one's label and latest
    revision, by id (which revision a reader tracks is the reader's)."""
    return {
        s.id: (s.label, s.latest_content, s.description, s.expire, s.rotate)
        for s in state.secrets
        if s.owner == "app"
    }


def _configured_providers(paths: workload.Paths) -> list[str]:
    """The ``[[provider]]`` names GARM reads from this machine's config at its restart."""
    config = tomllib.loads(paths.config_file.read_text())
    return [p["name"] for p in config.get("provider", [])]


def _provider_files(paths: workload.Paths) -> Iterator[tuple[str, tuple[str, str]]]:
    """(provider, (username, network)) for every provider file pair on a machine."""
    providers = paths.config_dir / "providers"
    if not providers.is_dir():
        return
    for toml in sorted(providers.glob("*.toml")):
        name = toml.name.removesuffix(".toml")
        network = tomllib.loads(toml.read_text())["network_id"]
        clouds = json.loads((providers / f"{name}-clouds.yaml").read_text())
        yield name, (clouds["clouds"][name]["auth"]["username"], network)


# --- the test ----------------------------------------------------------------------------


@pytest.fixture
def machines(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> Machines:
    """Every unit's machine sandboxed, on the test's clock; the charm is not patched."""
    routed = Machines()
    monkeypatch.setattr(subprocess, "run", routed)
    monkeypatch.setattr(passwd, "add_user", lambda *_, **__: None)
    monkeypatch.setattr(GarmCharm, "service_user", pwd.getpwuid(os.getuid()).pw_name)
    monkeypatch.setattr(GarmCharm, "paths", GarmCharm.paths)  # restored; set per hook
    monkeypatch.setattr(GarmCharm, "now", clock)
    return routed


class WithIntervals(Lifecycle):
    """The same stories, with the operator raising and lowering ``reconcile-interval``.

    A machine of its own, so that the main one's fixed draws (and the stories its
    coverage asks for) stay as they are.
    """

    @precondition(lambda self: any(u.state.leader and u.has_lease for u in self.alive()))
    @between_hooks(seconds=st.sampled_from([0, 30, 600]))
    def operator_sets_the_reconcile_interval(self, seconds: int):
        """``juju config garm reconcile-interval=…``: config-changed on every unit, while a
        leader holds a lease (where the interval and the lease meet). The leader's lease
        is the old one until its record of the new one is committed."""
        self.config = {**self.config, "reconcile-interval": seconds}
        for unit in self.alive():
            config = {**unit.state.config, **self.config}
            unit.state = dataclasses.replace(unit.state, config=config)
            self.hook(unit, "config_changed", lambda _: _Event("config_changed"))
            if unit.state.leader and unit.runs_garm and unit.has_lease:
                COVERAGE[f"reconcile-interval set to {seconds} under a lease"] += 1


class IntegratedAgain(Lifecycle):
    """The same stories, with the operator removing a relation and integrating it again
    at once. A machine of its own, as ``WithIntervals`` is.

    A scaleset of the removed relation is left to be taken over mostly when the two
    come this close: a leader running GARM retires it at the removal, and a later pass
    deletes it once its runners are gone, which the main machine's ~30 other rules leave
    time for between its ``remove_relation`` and ``integrate`` (there it is drained,
    ``leftover-drained``, or the application changes before its units join). Only a
    fenced heir (``cut_off``) leaves it serving, to be taken over as it is (``adoptable``).
    """

    @precondition(lambda self: self._apps(lambda a: a.relation_id is not None))
    @between_hooks(pick=st.integers(0, 9), cut_off=st.booleans())
    def relation_removed_and_integrated_again(self, pick: int, cut_off: bool):
        """``juju remove-relation`` and, at once, ``juju integrate`` again (a removal put
        right), perhaps just after the garm leader lost the controller (``cut_off``, where
        ``garm_leader_cut_off`` may); then the application's units join, one by one. The
        new relation finds the removed one's scaleset retired but not yet deleted where
        the leader's pass ran at the removal, still serving where the fenced heir could
        run none."""
        app = self._pick(self._apps(lambda a: a.relation_id is not None), pick)
        if cut_off and self._may_cut_off():
            self._cut_off_leader()
        self._remove_relation(app)
        self._integrate(app)
        for n in sorted(app.units):
            self._join(app, n)
        COVERAGE["integrated-again-at-once"] += 1


def tell_stories(
    kind: type[Lifecycle], garm: GarmDouble, clock: FakeClock, machines: Machines, **sizes: int
) -> None:
    """Run ``kind``'s stories on this GARM and these machines, counting what they reach.

    Shrinking a story of charm hooks takes minutes: the unit run reports the story as
    found (its last hooks are in the message); the soak shrinks it.
    """

    class OnThisGarm(kind):
        def __init__(self):
            super().__init__(garm, clock, machines)

    COVERAGE.clear()
    settings = soak_settings(sizes["steps"], sizes["examples"], shrink=False)
    run_state_machine_as_test(OnThisGarm, settings=settings)


def test_a_leaders_lease_outlasts_its_next_pass_whatever_the_interval_does(
    garm: GarmDouble, clock: FakeClock, machines: Machines
):
    tell_stories(WithIntervals, garm, clock, machines, steps=30, examples=10)
    # The interval raised (to 0: every 5 minutes; or to 600) on a leader holding a lease.
    raised = sum(COVERAGE[f"reconcile-interval set to {s} under a lease"] for s in (0, 600))
    checked = COVERAGE["lease-checked-against-the-next-pass"]
    assert raised and checked, f"stories never raised the interval under a lease: {COVERAGE}"


def test_juju_lifecycles_keep_every_invariant(
    garm: GarmDouble, clock: FakeClock, machines: Machines
):
    tell_stories(Lifecycle, garm, clock, machines, steps=40, examples=30)
    _reached(KINDS, "soak-lifecycle-report.json")


def test_a_relation_integrated_again_at_once_takes_over_what_it_left(
    garm: GarmDouble, clock: FakeClock, machines: Machines
):
    tell_stories(IntegratedAgain, garm, clock, machines, steps=30, examples=10)
    _reached(TAKEOVER_KINDS, "soak-integrated-again-report.json")


def _reached(kinds: tuple[str, ...], report_name: str) -> None:
    """Every one of ``kinds`` was reached; the counts go beside ``GARM_SOAK_REPORT``."""
    missing = [kind for kind in kinds if not COVERAGE[kind]]
    assert not missing, f"stories never reached {missing}: {dict(COVERAGE)}"
    report = os.environ.get("GARM_SOAK_REPORT")
    if report:
        path = Path(report).with_name(report_name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(sorted(COVERAGE.items())), indent=2) + "\n")


class _NoTimer:
    """The rules' ``data`` draw, for a story told by hand: the timer never fires between
    hooks (``_timer_between_hooks``)."""

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        assert label == "timer fires", label
        return 1


def _step(story: Lifecycle, rule: str, **kwargs: Any) -> None:
    """One of the machine's rules, as Hypothesis would run it, the timer never firing."""
    getattr(story, rule)(timer=_NoTimer(), **kwargs)


@contextlib.contextmanager
def _deployed(
    garm: GarmDouble, clock: FakeClock, machines: Machines, database: str
) -> Iterator[Lifecycle]:
    """A story told by hand: garm deployed on ``database`` (two units on PostgreSQL, with
    ``external-url``), cfg-a integrated with one unit, no job; its machines removed after."""
    story = Lifecycle(garm, clock, machines)
    try:
        _step(
            story,
            "deploy",
            database=database,
            units=1,
            labels=("linux",),
            jobs=0,
            refused=None,
            refused_with=400,
            external_url=database == "postgresql",
            apps=1,
        )
        yield story
    finally:
        shutil.rmtree(story.root, ignore_errors=True)


@pytest.mark.parametrize(
    "moves, held",
    [
        pytest.param([("repo", f"{ORG}/ci")], False, id="one-move-followed"),
        pytest.param(
            [("repo", f"{ORG}/ci"), ("org", "other-org")], True, id="two-moves-cannot-tell"
        ),
    ],
)
def test_moves_no_leader_saw_are_read_at_the_next_join(
    garm: GarmDouble,
    clock: FakeClock,
    machines: Machines,
    moves: list[tuple[str, str]],
    held: bool,
):
    """The soak's seed 132819804145516356279025204099530783283, by hand: cfg-a/1 is read
    publishing its org by the leader alone; that leader is removed before cfg-a/1 joins
    the unit that leads next, and cfg-a/1 moves where no leader sees it. One move is
    followed at the join (the peer data's memory outlives the leader that wrote it);
    after two, org and repo both changed since the last read, in an order no reader can
    tell: the operator is asked, and ``no_needless_choice`` lets it (it did not)."""
    with _deployed(garm, clock, machines, "postgresql") as story:
        _step(story, "garm_unit_removed", leader=False, dying_tick=-1)
        story.add_configurator_unit(pick=0, publish=True)
        _step(story, "units_join", pick=0)  # on the leader only: it is alone
        assert ("cfg-a", 1) in story.read_single
        _step(story, "add_garm_unit")  # cfg-a/0 and cfg-a/1 join it later
        _step(story, "garm_unit_removed", leader=True, dying_tick=-1)
        (heir,), rid = story.alive(), story.apps["cfg-a"].relation_id
        assert heir.state.leader and rid is not None and not heir.view[rid]
        for to in moves:
            _step(story, "configurator_moves", pick=0, to=to)
        while story._pending():
            _step(story, "units_join", pick=0)
        told = story._told(story.apps["cfg-a"]).get("cfg-a/1", "")
        assert ("publishes both" in told) is held, told
        assert (("cfg-a", 1) in story.read_single) is not held
        story.teardown()  # settles: the operator says which where asked


def test_a_move_back_garm_cannot_see_asks_for_what_garm_read(
    garm: GarmDouble, clock: FakeClock, machines: Machines
):
    """The soak's seed 185668691704366227116040303805697861743, by hand: cfg-a moves from
    its org to a repo (garm sees it and starts the changeover), then back to the org while
    the org's scaleset still serves. The data is as it was (ADR 0007: that move shows
    nothing), so garm goes on to the repo and retires the org's scaleset, as it must until
    the operator says otherwise. What cfg-a asks for meanwhile is the repo garm read, not
    the org the old scaleset happens to serve still: ``no_label_gap`` guaranteed that org
    and failed when the changeover ended. The operator's ``choose-entity`` then moves it."""
    with _deployed(garm, clock, machines, "sqlite") as story:
        story.every_invariant()
        app = story.apps["cfg-a"]
        _step(story, "configurator_moves", pick=0, to=("repo", f"{ORG}/ci"))
        story.every_invariant()
        _step(story, "configurator_moves", pick=0, to=("org", ORG))
        assert app.unseen_moves == {0} and app.known == ("repo", f"{ORG}/ci")
        assert story._asked()["cfg-a"][0] == ("repo", f"{ORG}/ci")
        story.every_invariant()
        for minutes in (0, 5, 45, 180):
            story.garm_works(minutes=minutes)
            story.every_invariant()
            story.reconcile_timer_fires(pick=0)
            story.every_invariant()
        live = [s for s in garm.scalesets() if story.serves(s)]
        assert {_entity(s) for s in live} == {("repo", f"{ORG}/ci")}, live  # the org retired
        _step(story, "operator_chooses_entity", pick=0)
        assert not app.unseen_moves and app.known == ("org", ORG)
        story.every_invariant()
        story.teardown()  # settles: back in the org


@pytest.mark.parametrize("rotate", [False, True], ids=["same-settings", "rotated-meanwhile"])
def test_a_scaleset_left_from_a_removed_relation_is_the_new_ones_only_once_taken_over(
    garm: GarmDouble, clock: FakeClock, machines: Machines, rotate: bool
):
    """The soak's seed 248267500367597811291653613472527549111, by hand: the garm leader
    is cut off, so the heir runs no pass while it waits out the lease; meanwhile cfg-a's
    OpenStack settings may change (``rotate``), and the operator removes cfg-a's relation
    and integrates it again. The heir's first pass, once every unit has joined, finds
    cfg-a's scaleset made for the removed relation. With the settings it was made with,
    the new relation takes its provider over and the scaleset with it; with others, the
    scaleset drains and goes first (the provider keeps the old settings meanwhile), as
    the removal meant. ``no_label_gap`` had counted that scaleset as serving the new
    relation from its relation-created on, and failed at the retirement."""
    with _deployed(garm, clock, machines, "postgresql") as story:
        story.every_invariant()
        app = story.apps["cfg-a"]
        (before,) = [s["id"] for s in garm.scalesets() if story.serves(s)]
        _step(story, "garm_leader_cut_off", pace=None)
        if rotate:
            _step(
                story,
                "configurator_config_changes",
                pick=0,
                labels=("linux",),
                rename=False,
                rotate=True,
                new_key=False,
                slow_github=False,
                move=None,
            )
        _step(story, "remove_relation", pick=0)
        story.every_invariant()
        _step(story, "integrate", pick=0)
        assert app.leftover == {before}
        story.every_invariant()
        _step(story, "cut_off_unit_reconnects")
        story.every_invariant()
        while story._pending():
            _step(story, "units_join", pick=0)
            story.every_invariant()
        kept = any(story.serves(s) for s in garm.scalesets() if s["id"] == before)
        assert kept is not rotate, story._explain(str(story.leader().state.unit_status))
        assert app.leftover == (frozenset({before}) if rotate else set())
        story.teardown()  # settles: a scaleset serves the new relation
        (after,) = [s["id"] for s in garm.scalesets() if story.serves(s)]
        assert (after != before) is rotate
