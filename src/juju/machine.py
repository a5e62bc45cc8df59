"""GARM on this machine, as the leader's pass asks for it: ``run``, one call, one answer.

Around it the fence's verdict is acted on (``juju.fence``, ``garm.lease``): ``fence``
first, ``keep_timer`` last, ``serve_on`` for a dying leader, ``release`` for a unit that
must run nothing, ``remove`` for one that is going. In ``juju``, not ``garm``: who may
run GARM here is Juju's to say (the fence, the sqlite home, which relation a provider
came from); the systemd and file verbs beneath it are ``garm.workload``'s.
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
from garm.database import choose_database
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

    ``kept``: the providers GARM was configured with (None: not this pass); ``record``:
    the same for the charm's record (None: as read); ``tls``: None is plain HTTP.
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
    changed |= paths.service.install([unit])
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
    """GARM's database, or why this unit may not run GARM on it; the sqlite home change.

    A unit that never ran GARM (no configuration yet) must not start one, on any
    database, while another unit's sqlite data holds the scalesets (``sqlite_tenancy``).
    """
    paths, peers = inputs.machine.paths, leader.peers
    current, answer = workload.configured_database(paths.config_file), leader.postgresql
    local = SqliteDatabase(str(paths.sqlite_file))
    choice = choose_database(current, inputs.postgresql_related, answer, live, local)
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

    A running GARM that was not restarted is not probed: the setup's first read
    (``GET /controller``) proves it answers, so a settled hook reads the controller once.
    One systemd gave up on is started again (its count cleared) at once if its files or
    binaries changed or its lapsed lease was renewed (``fence``), otherwise once the
    start limit window has passed (``workload.restart_due``); until then, only told why.
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
    """GARM's admin, its token kept while good: one login serves many hooks (``admin_token``)."""
    paths = inputs.machine.paths
    url, ca_file = workload.local_api(paths, config.api_port)
    return admin_token.admin_client(
        paths.admin_token_file, url, admin.username, admin.password, inputs.now(), ca_file=ca_file
    )


def base_url(config: CharmConfig, leader: LeaderInputs, tls: ServingTls | None = None) -> str:
    """The URL runners reach GARM at: configured, or this unit's address; https with ``tls``."""
    address = None if config.external_url else leader.address  # network-get only if needed
    return runner_url(config.external_url, address, config.api_port, tls is not None)


def relation_state(leader: LeaderInputs, config: CharmConfig, app: str) -> RelationState:
    """What the configurators ask for; here because runners are told GARM's host (``base_url``).

    ``app`` is this application's name as deployed, for the hints.
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
    """GARM's controller URLs and CA, from the certificate ``serving`` chose (``tls``)."""
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

    Scraped as configured here, over HTTPS once GARM serves it, checked against the CA
    the charm's own client uses (``workload.local_api``).
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

    Acts on ``juju.fence``'s verdict: stamps kept in ``fence_file``, the lease renewed
    before GARM may (re)start (its unit refuses to start without one), or GARM stopped.
    Only on a shared database: on sqlite no other unit can run GARM on this data
    (``sqlite_tenancy``), so no lease, and a unit cut off from Juju keeps serving. A
    config that does not read (None) keeps the recorded lease: a typo does not stop
    GARM. The lease counts from ``inputs.asked``: Juju guarantees leadership for 30 s
    from that answer, not from whenever the pass gets here.
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

    The timer renews GARM's lease between hooks, so while a lease is held the lease sets
    the pace (``fence.pace``), however the pass ended: right after ``reconcile-interval``
    is raised the lease, and so the pace, stay the old ones until the next pass. Without
    one, it runs at ``reconcile-interval`` while GARM ``runs`` (0 removes it), and never
    stops while the fence waits, so that the wait ends at a pass; otherwise it is left.
    The next run is told only while GARM runs.
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

    Juju keeps a dying unit the leader until it is dead, so its GARM is the only one
    there can be until its stop hook. Nothing is waited for (the peer relation it leaves
    may show anything): the lease is the shorter of the recorded and the configured one,
    nothing is stamped or recorded, and the timer goes on at the lease's pace.
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
    """Nothing that only a leader runs is left here: no timer, no metrics server.

    Nor the admin token: GARM cannot revoke it, and it would be good against the next
    leader's GARM on a shared database. ``timer_too`` False leaves a dying leader its timer.
    """
    if timer_too:
        timer.units(paths).remove()
    requeue.cancel(paths)
    admin_token.keep(paths.admin_token_file, "", None)
    endpoint.remove(paths)


def release(paths: workload.Paths, why: str) -> RecordChange:
    """No GARM on this machine any more, nor a lease for one, and stood down: its record can go.

    GARM stops first, so a failure leaves the checker and timer for the retried hook; the
    record goes only once systemd says GARM is not running (None: it stays).
    """
    if workload.stop(paths.unit_file):
        logger.info("%s: GARM stopped on this unit", why)
    running = workload.is_active()
    if running:
        logger.error("%s: GARM is still running here; its record stays", why)
    else:
        _unfenced(paths)
    stand_down(paths)
    return None if running else "clear"


def _unfenced(paths: workload.Paths) -> None:
    """GARM on data no other unit can share (sqlite): no lease, no checker, no stamps."""
    lease.remove(paths)
    paths.fence_file.unlink(missing_ok=True)


def remove(paths: workload.Paths) -> None:
    """Take GARM's configuration, secrets and data off the machine."""
    release(paths, "unit removed")
    workload.remove(paths)
