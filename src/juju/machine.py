"""GARM on this machine, as the leader's pass asks for it: one call, one answer.

``run`` makes GARM run here and answers ``OnMachine``: the resources checked and
installed (``garm.resources``), its database chosen (``garm.database``) and this unit's
right to run it on that data (``juju.lifecycle.sqlite_tenancy``), its providers kept
(``garm.providers``), its files and systemd unit rendered (``garm.config``), restarted
when any changed or it is down, answering. Around it, the fence's verdict acted on
(``juju.fence`` holds its rules): ``fence`` first of all, with GARM's lease
(``garm.lease``); ``keep_timer`` last; ``serve_on`` for a dying leader; ``release``,
``stand_down``, ``stop`` and ``remove`` for a unit that must run nothing.

It sits in ``juju``, not ``garm``, because who may run GARM here is Juju's to say (the
fence, the sqlite home, which relation a provider came from); the systemd and file verbs
beneath it are ``garm.workload``'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache, partial
from urllib.parse import urlsplit

from garm import admin_token, lease, requeue, resources, timer, workload
from garm.client import GarmApiError, GarmClient, GarmUnreachable
from garm.config import (
    Database,
    GarmConfig,
    PostgresqlDatabase,
    SqliteDatabase,
    render_files,
    render_unit,
)
from garm.database import choose_database, moving_to_postgresql
from garm.identity import where as where_data
from garm.models import ScaleSet
from garm.providers import KeptProviders, Recorded, kept_providers
from garm.setup import AdminLogin, ControllerUrls
from garm.tls import (
    Awaited,
    Readiness,
    ServingTls,
    plain_http_warning,
    readiness,
    runner_url,
    serving_hosts,
)
from juju import fence as fences
from juju import owners, relation
from juju.config import FIRST_UNPRIVILEGED_PORT, CharmConfig
from juju.lifecycle import sqlite_tenancy
from juju.records import HomeChange, Inputs, InternalSecrets, LeaderInputs, RecordChange
from juju.relation import GarmInputs, RelationState, UnitProblem
from juju.status import Summary
from observe import endpoint
from observe.token import LeaderGarm

logger = logging.getLogger(__name__)

# How long to wait for GARM to answer after a (re)start.
START_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class OnMachine:
    """What making GARM run here did; ``stopped`` says why the pass cannot go on.

    ``kept`` is the providers GARM was configured with (None: it was not, this pass);
    ``record`` the same to write to the charm's record, None when it is what was read;
    ``tls`` the certificate GARM was configured to serve (None: plain HTTP).
    """

    version: str | None = None
    sqlite_home: HomeChange = None
    problems: tuple[UnitProblem, ...] = ()
    stopped: Summary | None = None
    kept: KeptProviders | None = None
    record: tuple[Recorded, ...] | None = None
    tls: ServingTls | None = None


def run(
    inputs: Inputs,
    leader: LeaderInputs,
    config: CharmConfig,
    admin: AdminLogin,
    internal: InternalSecrets,
    wanted: GarmInputs,
) -> OnMachine:
    """Install, place, configure and (re)start GARM as needed, then wait for it to answer."""
    machine = inputs.machine
    paths = machine.paths
    installed = _install(inputs, leader)
    if isinstance(installed, Summary):
        return OnMachine(stopped=installed)
    version, changed = installed
    ready = serving(inputs, leader, config)
    if ready.stop:
        return OnMachine(
            version, stopped=Summary("blocked" if ready.blocked else "waiting", ready.stop)
        )
    tls = ready.tls
    files = workload.read_provider_files(paths.config_dir)
    # GARM's scalesets before it is reconfigured: read once, and only when a choice
    # comes to hang on them.
    live = cache(partial(_live_scalesets, inputs, config, admin))
    database, home, problems = _place_data(inputs, leader, live)
    if isinstance(database, Summary):
        return OnMachine(version, home, stopped=database)
    # What the last leader recorded wins over this machine's files (``garm.providers``).
    recorded = leader.provider_record
    owned = owners.published(wanted.providers, leader.configurators)
    kept = kept_providers(
        owned,
        recorded,
        files,
        lambda: None if (s := live()) is None else {x.provider_name for x in s},
    )
    for name in kept.dropped:
        logger.info("provider %s is no longer used: removed from GARM", name)
    rendered = GarmConfig(
        port=config.api_port,
        jwt_secret=internal.jwt_secret,
        db_passphrase=internal.db_passphrase,
        database=database,
        providers=kept.providers,
        proxy=leader.proxy,
        provider_executable=str(paths.provider_binary),
        config_dir=str(paths.config_dir),
        tls=tls,
    )
    changed |= workload.write_files(paths.config_dir, render_files(rendered), machine.user)
    unit = render_unit(
        str(paths.binary),
        str(paths.config_file),
        str(paths.data_dir),
        machine.user,
        privileged_port=config.api_port < FIRST_UNPRIVILEGED_PORT,
        # On a shared database GARM may start only while its lease holds (``fence``).
        lease_check=str(paths.lease_script) if isinstance(database, PostgresqlDatabase) else None,
    )
    changed |= workload.ensure_service(paths.unit_file, unit)
    if changed and (warning := plain_http_warning(base_url(config, leader, tls), inputs.app)):
        logger.warning("%s", warning)
    answering = _start(inputs, config, changed)
    if ready.refused:  # told while the pass goes on with the certificate served
        problems = (*problems, UnitProblem("certificates", ready.refused, True))
    return OnMachine(version, home, problems, answering, kept, kept.to_write(recorded), tls)


def _install(inputs: Inputs, leader: LeaderInputs) -> tuple[str, bool] | Summary:
    """The resources checked and installed: GARM's version, and whether a binary changed."""
    paths, user = inputs.machine.paths, inputs.machine.user
    workload.ensure_directory(paths.charm_dir, None)
    workload.ensure_user()  # the resources are checked as GARM's user
    sources: dict[str, resources.Prepared] = {}
    for name in resources.NAMES:
        path = leader.resource(name)
        if path is None:
            attach = f"juju attach-resource {inputs.app} {name}=<file>"
            return Summary("blocked", f"Attach the {name} resource: {attach}")
        try:
            sources[name] = resources.prepare_once(name, path, paths.staging, user)
        except resources.ResourceError as exc:
            message = exc.status_line(inputs.app)
            logger.error("%s", message)
            return Summary("blocked", message)
    changed = workload.install_binary(sources["garm"].path, paths.binary)
    changed |= workload.install_binary(
        sources["garm-provider-openstack"].path, paths.provider_binary
    )
    workload.ensure_directory(paths.data_dir, user)
    return sources["garm"].version or "", changed


def _place_data(
    inputs: Inputs, leader: LeaderInputs, live: Callable[[], list[ScaleSet] | None]
) -> tuple[Database | Summary, HomeChange, tuple[UnitProblem, ...]]:
    """GARM's database (``garm.database``), or why this unit may not run GARM on it.

    With what that asks of the peer relation's sqlite home, and what to report. A unit
    that never ran GARM (no configuration written yet) must not start one, on sqlite or
    on a database that is new to it, while another unit's sqlite data holds the
    scalesets (``juju.lifecycle.sqlite_tenancy``).
    """
    paths, peers = inputs.machine.paths, leader.peers
    current, answer = workload.configured_database(paths.config_file), leader.postgresql
    choice = choose_database(
        current,
        inputs.postgresql_related,
        answer,
        live() if moving_to_postgresql(current, answer) else None,
        SqliteDatabase(str(paths.sqlite_file)),
    )
    if choice.database is None:
        return Summary("waiting", choice.waiting), None, ()
    problems = [UnitProblem("postgresql", choice.problem, choice.blocking)]
    problems = problems if choice.problem else []
    on_sqlite = isinstance(choice.database, SqliteDatabase)
    home: HomeChange = None
    if on_sqlite or not paths.config_file.exists():
        sqlite = sqlite_tenancy(peers.home, inputs.unit, peers.holders, inputs.alive)
        if on_sqlite and sqlite.claim:
            home = "claim"
        if not sqlite.may_run:
            return Summary("blocked", sqlite.problem), home, ()
        if on_sqlite and sqlite.problem:
            problems.append(UnitProblem(inputs.unit, sqlite.problem, True))
    if not on_sqlite and peers.home == inputs.unit:
        home = "forget"
    return choice.database, home, tuple(problems)


def serving(inputs: Inputs, leader: LeaderInputs, config: CharmConfig) -> Readiness:
    """The certificate GARM is to serve, and whether the pass may go on (``garm.tls``)."""
    asked = leader.tls
    if asked is None:
        return Readiness()
    hosts = serving_hosts(leader.address, config.external_url)
    served = partial(workload.served_tls, inputs.machine.paths)
    ready = readiness(asked, served, inputs.now(), hosts)
    if ready.stop or ready.refused:
        logger.warning("%s", ready.stop or ready.refused)
    elif isinstance(asked, Awaited):
        logger.info("%s; GARM goes on serving the certificate it has", asked.why)
    return ready


def _start(inputs: Inputs, config: CharmConfig, changed: bool) -> Summary | None:
    """GARM restarted if anything changed or it is down; None once it answers.

    A GARM that was not restarted, and that systemd says is running, is not probed:
    the setup's first read (``GET /controller``, as the admin) is what proves it
    answers, so a settled hook reads the controller once. One that does not answer that
    read stops the pass all the same (``GARM unreachable, will retry``). One that is not
    running after its start (systemd gave up, or still waits to restart it) is told with
    why, from its journal. One systemd gave up on is started again (its count cleared)
    at once if its files or binaries changed or its lease was renewed after it lapsed
    (``fence``), otherwise once systemd's start limit window has passed since the
    pass last cleared it (``workload.restart_due``); until then the pass only says why.
    """
    if not changed and workload.is_active():
        return None
    paths, since = inputs.machine.paths, inputs.now()
    clear = changed or workload.restart_due(paths, since)
    if not clear and workload.gave_up():
        last = workload.last_start(paths) or since
        return Summary("blocked", f"GARM does not start: {workload.start_failure(last)}")
    logger.info("starting GARM (configuration or binaries changed, or it is not running)")
    url, ca_file = workload.local_api(paths, config.api_port)
    if workload.restart(paths, since, clear=clear) and workload.wait_until_answering(
        url, START_TIMEOUT_SECONDS, ca_file=ca_file
    ):
        return None
    if workload.is_active():
        return Summary("waiting", "Waiting for GARM to answer on its API port")
    return Summary("blocked", f"GARM does not start: {workload.start_failure(since)}")


def _live_scalesets(
    inputs: Inputs, config: CharmConfig, admin: AdminLogin
) -> list[ScaleSet] | None:
    """GARM's scalesets as it runs now, or None when it cannot tell (not running yet)."""
    try:
        with client(inputs, config, admin) as garm:
            return garm.list_scalesets()
    except (GarmUnreachable, GarmApiError):
        return None


# --- reaching it ----------------------------------------------------------------------


def client(
    inputs: Inputs, config: CharmConfig, admin: AdminLogin
) -> contextlib.AbstractContextManager[GarmClient]:
    """GARM's admin, for every request of the charm's: one login serves many hooks.

    The login token is kept on the machine while it is good (``garm.admin_token``), so a
    hook logs in only when it has none, or GARM refused it.
    """
    paths = inputs.machine.paths
    url, ca_file = workload.local_api(paths, config.api_port)
    return admin_token.admin_client(
        paths.admin_token_file, url, admin.username, admin.password, inputs.now(), ca_file=ca_file
    )


def base_url(config: CharmConfig, leader: LeaderInputs, tls: ServingTls | None = None) -> str:
    """The URL runners reach GARM at: configured, or this unit's address (``garm.tls``).

    https when GARM serves ``tls``.
    """
    address = None if config.external_url else leader.address  # network-get only if needed
    return runner_url(config.external_url, address, config.api_port, tls is not None)


def relation_state(leader: LeaderInputs, config: CharmConfig, app: str) -> RelationState:
    """What the configurators ask for, with what every runner is set up with.

    Here because runners are told GARM's host: where they reach it (``base_url``). ``app``
    is this application's name as deployed, for the hints.
    """
    seen = leader.configurators
    host = urlsplit(base_url(config, leader)).hostname or ""
    runner = dataclasses.replace(seen.runner, garm_host=host)
    return relation.relation_state(
        seen.related, seen.units, seen.view, runner, leader.peers.entities, app=app
    )


def controller_urls(
    config: CharmConfig, leader: LeaderInputs, tls: ServingTls | None
) -> ControllerUrls:
    """GARM's controller URLs, and the CA runners are to trust GARM by.

    From the certificate GARM serves (``tls``), the one ``serving`` chose, which
    is not always the one just issued.
    """
    bundle = b"" if tls is None else tls.runner_bundle()
    return ControllerUrls.from_base(base_url(config, leader, tls), bundle)


def where(inputs: Inputs) -> str:
    """Where GARM's data is, as its configuration on this machine names it."""
    database = workload.configured_database(inputs.machine.paths.config_file)
    return where_data(database, inputs.unit)


def garm_here(
    inputs: Inputs, leader: LeaderInputs, config: CharmConfig | None, *, answered: bool = False
) -> LeaderGarm | None:
    """The leader's GARM for the collector; its metrics token is renewed only if it answered.

    ``answered``: GARM answered this pass. The collector scrapes GARM as GARM is
    configured on this machine, over HTTPS once it serves it (``workload.local_api``),
    checked against the CA the charm's own client checks it by.
    """
    if config is None:
        return None
    ca_file = workload.local_api(inputs.machine.paths, config.api_port)[1]
    ca = (workload.read_text(ca_file) or "") if ca_file else ""
    here = partial(LeaderGarm, config.api_port, https=ca_file is not None, ca=ca)
    internal = leader.internal
    if internal is None:
        return here()
    admin = leader.admin if answered else None  # read only when it is used
    if not answered or admin is None:
        return here(jwt_secret=internal.jwt_secret)
    fetch = partial(_metrics_token, inputs, config, admin)
    return here(jwt_secret=internal.jwt_secret, fetch_token=fetch)


def _metrics_token(inputs: Inputs, config: CharmConfig, admin: AdminLogin) -> str:
    with client(inputs, config, admin) as garm:
        return garm.get_metrics_token()


# --- the fence, the timer, standing down ----------------------------------------------


def on_postgresql(inputs: Inputs) -> bool:
    """Whether GARM's data is shared (PostgreSQL, related or configured): then it is fenced."""
    return workload.on_postgresql(inputs.machine.paths.config_file, inputs.postgresql_related)


def fence(inputs: Inputs, leader: LeaderInputs, config: CharmConfig | None) -> fences.Fence:
    """Whether this leader may run GARM now, first of all its steps, acted on at once.

    The fence's rules are pure (``juju.fence``); this acts on their verdict: the stamps
    kept in ``fence_file``, the lease renewed (``garm.lease``) before GARM may (re)start,
    since GARM's unit refuses to start without one, and a GARM of this unit's own
    stopped where it may not run. Only on a shared database: on sqlite no other unit
    can run GARM on this data (``juju.lifecycle.sqlite_tenancy`` says which may), so
    GARM keeps no lease and a single unit cut off from Juju keeps serving.

    ``unseen`` are this application's units that have not joined this unit's peer
    relation (None: goal-state cannot say). The config is not needed to decide: with one
    that does not read (None), the lease already recorded is kept, so that a typo does
    not stop GARM. The lease is counted from ``inputs.asked``, when this hook asked Juju
    whether this unit leads: Juju guarantees leadership for 30 s from that answer, not
    from whenever the pass gets here.
    """
    paths, unit = inputs.machine.paths, inputs.unit
    if not on_postgresql(inputs):
        _unfenced(paths)
        return fences.Fence(True)
    now = inputs.now()
    records, alive = leader.peers.running, inputs.alive
    unseen = None if alive is None else set(alive) - leader.peers.joined - {unit}
    unannounced = records is not None and unit not in records
    verdict = fences.decide(
        unit,
        records,
        fences.read_memory(workload.read_text(paths.fence_file)),
        unannounced and workload.is_active(),
        fences.lease_seconds(config.reconcile_interval) if config else None,
        now,
        unseen,
    )
    workload.write_own(paths.fence_file, fences.render_memory(verdict.memory))
    if verdict.may_run:
        if not lease.holds(paths, now):
            # A lapsed lease may be why GARM is not running: that cause is gone now,
            # so the pass may start it at once (``workload.restart_due``).
            paths.start_file.unlink(missing_ok=True)
        lease.renew(paths, inputs.asked, verdict.lease)
        lease.keep(paths)
    else:
        logger.info("%s", verdict.waiting)
        if workload.stop(paths.unit_file):
            logger.warning("GARM stopped on this leader until the fence clears")
        lease.end(paths)
    return verdict


def keep_timer(
    inputs: Inputs,
    config: CharmConfig | None,
    fenced: fences.Fence,
    *,
    runs: bool,
    ended: datetime,
) -> datetime | None:
    """The reconcile timer as a pass that ended at ``ended`` leaves it; when it runs next.

    The timer is what renews GARM's lease between hooks, so while a lease is held the
    lease decides the pace (``fence.pace``), however the pass ended: right after
    ``reconcile-interval`` is raised the lease is still the old length and so is the
    pace, until the next pass takes the longer one. Without a lease (on sqlite) the timer
    runs at ``reconcile-interval`` while GARM runs (``runs``), and 0 removes it; while the
    fence waits it never stops, so that the wait ends at a pass. Otherwise it is left.
    The next run is told only while GARM runs (None otherwise, or with no timer).
    """
    if fenced.lease:
        interval = fences.pace(fenced.lease)
    elif config is not None and not fenced.may_run:
        interval = config.reconcile_interval or fences.PACE_WITHOUT_TIMER
    elif config is not None and runs:
        interval = config.reconcile_interval
    else:
        return None
    timer.keep(inputs.machine.paths, inputs.unit, interval)
    return ended + timedelta(seconds=interval) if interval and runs else None


def serve_on(inputs: Inputs, leader: LeaderInputs, config: CharmConfig | None) -> None:
    """A dying leader's GARM serves on, its lease renewed, while all else stands down.

    Juju keeps a dying unit the leader until it is dead, so no other unit can lead and
    start GARM meanwhile: this unit's GARM is the only one there can be until its stop
    hook stops it, however long a failing teardown hook holds it. So nothing is waited
    for (the peer relation it is leaving may show its peers gone or not yet there): the
    lease is renewed for the shorter of the one its record names and the one the config
    asks for, nothing is stamped or recorded, and the timer that renews it goes on at
    the lease's pace.
    """
    paths, held = inputs.machine.paths, 0
    if on_postgresql(inputs):
        recorded = (leader.peers.running or {}).get(inputs.unit)
        leases = [
            fences.read_record(recorded),
            fences.lease_seconds(config.reconcile_interval) if config else None,
        ]
        held = min((n for n in leases if n), default=fences.lease_seconds(0))
        lease.renew(paths, inputs.asked, held)
        lease.keep(paths)
    stand_down(paths, timer_too=not held)
    if held:
        timer.keep(paths, inputs.unit, fences.pace(held))


def stand_down(paths: workload.Paths, *, timer_too: bool = True) -> None:
    """Nothing that only a leader runs is left running here: no timer, no metrics server.

    Nor GARM's admin token (``garm.admin_token``): GARM cannot revoke it, and it would
    be good against the next leader's GARM on a shared database; leading again costs
    one login. ``timer_too`` False leaves the reconcile timer to a dying leader, whose
    lease it renews.
    """
    if timer_too:
        timer.remove(paths)
    requeue.cancel(paths)
    admin_token.keep(paths.admin_token_file, "", None)
    endpoint.remove(paths)


def release(paths: workload.Paths, why: str) -> RecordChange:
    """No GARM on this machine any more, nor a lease for one: its record can go.

    GARM stops before anything else does, so a failure leaves the lease's checker and the
    reconcile timer in place for the retried hook; and the record goes only once systemd
    says GARM is not running (None: it stays, as does the checker).
    """
    if workload.stop(paths.unit_file):
        logger.info("%s: GARM stopped on this unit", why)
    if workload.is_active():
        logger.error("%s: GARM is still running here; its record stays", why)
        return None
    _unfenced(paths)
    return "clear"


def _unfenced(paths: workload.Paths) -> None:
    """GARM on data no other unit can share (sqlite): no lease, no checker, no stamps."""
    lease.remove(paths)
    paths.fence_file.unlink(missing_ok=True)


def stop(paths: workload.Paths) -> RecordChange:
    """The unit is going: GARM stops with it (relations were torn down before)."""
    record = release(paths, "unit stopping")
    stand_down(paths)
    return record


def remove(paths: workload.Paths) -> None:
    """Take GARM's configuration, secrets and data off the machine."""
    release(paths, "unit removed")
    stand_down(paths)
    workload.remove(paths)
