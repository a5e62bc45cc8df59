"""The pass every hook runs: from what Juju told it to what the charm tells Juju back.

What a unit does depends on what it is (``run``):

- a unit being removed stands down: it changes no scaleset any more (ADR 0002);
- a unit that does not lead stands by: GARM runs on the leader alone;
- the leader leads (``_lead``), in this order:

  1. its config, checked whole, and its own secrets, made once;
  2. what the configurators ask for (``juju.relation``), and what runners get besides;
  3. GARM running on this machine (``_ensure_running``): the resources checked and
     installed, its database chosen (``garm.database``), its providers kept
     (``garm.providers``), its files rendered, restarted when any changed, answering;
  4. the reconcile timer, and GARM's API port to open;
  5. GARM's setup (``_ensure_setup``): admin, URLs, GitHub credentials, orgs and repos,
     only on the GARM the charm set up (``garm.identity``);
  6. the scalesets reconciled (``scalesets.reconciler``);
  7. what it comes to: the status line, what each configurator is told, the metrics.

There is no ops here. The charm reads Juju into ``Inputs`` and writes the ``PassResult``
back (status, relation data, ports, the secrets to make); the pass does its work on the
machine and on GARM itself. A step that cannot go on returns the status that says why,
and the pass stops there with what it has done so far.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache, partial
from pathlib import Path
from urllib.parse import urlsplit

from garm import admin_token, requeue, resources, timer, workload
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
from garm.identity import Identity, adoption, refusal, to_record, where
from garm.models import ScaleSet
from garm.providers import KeptProviders, Recorded, kept_providers
from garm.refusals import Held, Refusals
from garm.setup import (
    NO_ADMIN_YET,
    AdminLogin,
    ControllerUrls,
    Log,
    SetupOutcome,
    apply_setup,
    ensure_controller,
    plan_setup,
    read_controller,
)
from garm.setup import logger as setup_logger
from garm.tls import (
    Awaited,
    Readiness,
    ServingTls,
    plain_http_warning,
    readiness,
    runner_url,
    serving_hosts,
)
from juju import entities, fence, owners, status, tenancy
from juju.config import FIRST_UNPRIVILEGED_PORT, CharmConfig, ConfigError
from juju.lifecycle import SQLITE_MULTI_UNIT, sqlite_tenancy
from juju.publish import published
from juju.records import (
    HomeChange,
    IdentityChange,
    Inputs,
    InternalSecrets,
    LeaderInputs,
    Machine,
    PeerRecords,
    RecordChange,
)
from juju.relation import (
    GarmInputs,
    RelationState,
    UnitProblem,
    failover_address,
    garm_inputs,
    relation_state,
)
from juju.status import BEING_REMOVED, Summary, describe_progress, summarise
from observe import endpoint
from observe.token import LeaderGarm
from scalesets.actions import Observed
from scalesets.preview import Rehearsal, SimulatedGarm
from scalesets.reconciler import Garm, Outcome, describe_action, observe, preview, reconcile

logger = logging.getLogger(__name__)

# A whole pass stops starting writes after this long; update-status picks up the rest.
PASS_BUDGET_SECONDS = 60.0
# How long to wait for GARM to answer after a (re)start.
START_TIMEOUT_SECONDS = 30.0
STANDING_BY = "Standing by: the leader unit runs GARM"


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
    """An action's results, or why it failed."""

    results: Mapping[str, str] = field(default_factory=dict)
    failure: str = ""


def run(inputs: Inputs) -> PassResult:
    """One hook's pass on this unit: stand down, stand by, or lead."""
    paths, leader = inputs.machine.paths, inputs.leader
    # A dying leader keeps serving only a GARM that runs; it starts none.
    if leader is None or (inputs.dying and not workload.is_active()):
        return _stand_by(inputs)
    config = _usable(leader)
    if inputs.dying:
        return _serve_until_stopped(inputs, leader, config)
    # Not knowing whether another GARM runs counts as one that may (``juju.fence``).
    fenced = _fence(inputs, leader)
    started = time.monotonic()
    result = _lead(inputs, leader, fenced)
    ended = inputs.now()
    endpoint.publish(
        paths,
        result.outcome,
        ended=ended,
        duration=time.monotonic() - started,
        reconcile_interval=config.reconcile_interval if config else 0,
        settings=config.settings if config else None,
        version=result.workload_version or "",
    )
    # The timer runs whenever GARM does (its port open), counting from a run's end.
    interval = _keep_timer(inputs, config, fenced, runs=bool(result.ports))
    if interval and result.ports:
        result = dataclasses.replace(result, next_due=ended + timedelta(seconds=interval))
    seconds = requeue.delay(result.requeue_at, ended, result.next_due)
    requeue.keep(paths, inputs.unit, seconds, ended)
    return result


def _serve_until_stopped(
    inputs: Inputs, leader: LeaderInputs, config: CharmConfig | None
) -> PassResult:
    """A dying leader changes no scaleset any more (ADR 0002), and its GARM serves on.

    Juju keeps a dying unit the leader until it is dead, so no other unit can lead and
    start GARM meanwhile: this unit's GARM is the only one there can be until its stop
    hook stops it, however long a failing teardown hook holds it. So its lease is
    renewed (``juju.tenancy.serve_on``: no fence to wait at, whatever the peer relation
    it is leaving shows), the timer that renews it goes on at the lease's pace, and its
    API port stays open; everything else only a leader runs stands down.
    """
    paths, held = inputs.machine.paths, 0
    if _on_postgresql(inputs):
        recorded = (leader.peers.running or {}).get(inputs.unit)
        interval = config.reconcile_interval if config else None
        held = tenancy.serve_on(paths, recorded, interval, inputs.asked)
    stand_down(paths, timer_too=not held)
    if held:
        timer.keep(paths, inputs.unit, fence.pace(held))
    return PassResult(
        Summary("maintenance", BEING_REMOVED),
        ports=(config.api_port,) if config else None,
        # A leader whose config cannot be read leaves what it told the collector before.
        publish_telemetry=config is not None,
        garm_here=_garm_here(inputs),
    )


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


def stop(paths: workload.Paths) -> RecordChange:
    """The unit is going: GARM stops with it (relations were torn down before)."""
    record = tenancy.release(paths, "unit stopping")
    stand_down(paths)
    return record


def remove(paths: workload.Paths) -> None:
    """Take GARM's configuration, secrets and data off the machine."""
    tenancy.release(paths, "unit removed")
    stand_down(paths)
    workload.remove(paths)


def plan(inputs: Inputs) -> ActionAnswer:
    """The ``plan`` action: every write the next pass would make, made by none."""
    refused = refuse_action(inputs, "plan")
    if refused or inputs.leader is None:
        return ActionAnswer(failure=refused)
    leader = inputs.leader
    config = leader.config
    if isinstance(config, ConfigError):
        return ActionAnswer(failure=f"Invalid config: {config}")
    state = _relation_state(leader, config)
    admin = leader.admin
    if admin is None:
        return ActionAnswer(failure=NO_ADMIN_YET)
    now, wanted = inputs.now(), garm_inputs(state.units, leader.read_secret)
    ready = _serving(inputs, leader, config)
    if ready.stop:
        return ActionAnswer(failure=f"The next pass would stop: {ready.stop}")
    tls = ready.tls
    rehearsal = Rehearsal(setup_logger, {})
    try:
        with _client(inputs, config, admin) as client:
            # The pass's own steps over a GARM that is read, never written: its setup,
            # then its scalesets from what the setup would leave.
            garm = SimulatedGarm(client, now)
            setup = _ensure_setup(
                garm,
                admin,
                _controller_urls(config, leader, tls),
                wanted,
                state,
                SetupOutcome(leader.peers.memory),
                now,
                leader.peers.identity,
                _where(inputs),
                rehearsal,
            )
            if setup.stopped is not None:
                return ActionAnswer(failure=f"The next pass would stop: {setup.stopped.message}")
            planned = preview(
                garm,
                state.desired,
                now,
                config.settings,
                setup.outcome.memory,
                budget=PASS_BUDGET_SECONDS,
                observed=setup.observed,
            )
    except GarmUnreachable as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc}")
    except GarmApiError as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc.cause}")
    held = (*setup.outcome.held, *planned.held)
    # The planner tells every skipped spec, the held ones of the relation's data too.
    skipped = [f"{s.source}: {s.name or 'its scaleset'}: {s.reason}" for s in planned.skipped]
    return ActionAnswer(
        {
            "writes": str(len(setup.outcome.done) + len(planned.actions)),
            "setup": "\n".join(setup.outcome.done) or "none",
            "actions": "\n".join(describe_action(a) for a in planned.actions) or "none",
            "phases": "\n".join(describe_progress(p) for p in planned.progress) or "converged",
            # Writes GARM refused before, waiting out their back-off: not sent.
            "held": "\n".join(h.describe() for h in held) or "none",
            "skipped": "\n".join(skipped) or "none",
            # What the pass would stop at: a write the charm cannot even make, or its
            # budget spent (the next pass goes on from there).
            "errors": "\n".join(e.error for e in planned.errors) or "none",
            "cut-short": "yes" if planned.cut_short else "no",
            "next-pass": _next_pass(
                _wake(held, planned.wake, now if planned.cut_short else None), now, config
            ),
        }
    )


def _next_pass(at: datetime | None, now: datetime, config: CharmConfig) -> str:
    """When the pass after the next would come: early (``garm.requeue``), or as it comes.

    As ``run`` decides it: early only when that comes before the reconcile timer's run.
    """
    interval = config.reconcile_interval
    seconds = requeue.delay(at, now, now + timedelta(seconds=interval) if interval else None)
    if seconds is not None:
        return f"in {seconds}s"
    return f"the reconcile timer's, within {interval}s" if interval else "the next hook's"


def adopt(inputs: Inputs, asked: str) -> tuple[ActionAnswer, IdentityChange]:
    """The ``adopt-garm`` action: GARM as it answers now is the charm's (``garm.identity``).

    GARM is read as the pass reads it, so that only the id it answers at this moment is
    taken, and ``new`` only while it is empty. Nothing is written to GARM: the next pass
    sets it up. What to record goes back with the answer, for the charm to write.
    """
    refused = refuse_action(inputs, "adopt-garm")
    if refused or inputs.leader is None:
        return ActionAnswer(failure=refused), None
    leader = inputs.leader
    config, admin = leader.config, leader.admin
    if isinstance(config, ConfigError):
        return ActionAnswer(failure=f"Invalid config: {config}"), None
    if admin is None:
        return ActionAnswer(failure=NO_ADMIN_YET), None
    try:
        with _client(inputs, config, admin) as client:
            have = read_controller(client)
    except GarmUnreachable as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc}"), None
    except GarmApiError as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc.cause}"), None
    here, recorded = _where(inputs), leader.peers.identity
    taken = adoption(asked, have.controller_id if have else None, here)
    if taken.refused:
        return ActionAnswer(failure=taken.refused), None
    new = taken.record
    results = {
        "previous": recorded.describe() if recorded else "none",
        "adopted": new.describe() if new else f"a new, empty GARM in {here}",
        "next": "the next pass sets it up (now: juju run garm/leader reconcile)",
    }
    return ActionAnswer(results), new or "forget"


def refuse_action(inputs: Inputs, action: str) -> str:
    """Why a leader's action cannot run on this unit now; "" when it can."""
    return status.refuse_action(inputs.leader is not None, inputs.dying, action)


def reconciled(result: PassResult) -> dict[str, str]:
    """The ``reconcile`` action's results: the status the pass earned and what it did."""
    done = result.outcome.done if result.outcome else ()
    return {
        "status": f"{result.summary.kind}: {result.summary.message}",
        "done": "\n".join(describe_action(a) for a in done) or "none",
    }


# --- standing by ----------------------------------------------------------------------


def _stand_by(inputs: Inputs) -> PassResult:
    """A unit that does not lead: no GARM here, and say if sqlite is being shared."""
    paths = inputs.machine.paths
    record = tenancy.release(paths, "being removed" if inputs.dying else "not the leader")
    stand_down(paths)
    if inputs.dying:
        return PassResult(Summary("maintenance", BEING_REMOVED), ports=(), garm_record=record)
    crowded = not _on_postgresql(inputs) and inputs.alive is not None and len(inputs.alive) > 1
    summary = Summary("blocked", SQLITE_MULTI_UNIT) if crowded else Summary("active", STANDING_BY)
    return PassResult(summary, ports=(), workload_version="", garm_record=record)


# --- leading --------------------------------------------------------------------------


def _lead(inputs: Inputs, leader: LeaderInputs, fenced: fence.Fence) -> PassResult:
    """The leader's steps, in order; each one that cannot go on ends the pass."""
    config = leader.config
    if isinstance(config, ConfigError):
        logger.error("invalid config: %s", config)
        summary = Summary("blocked", f"Invalid config: {config}")
        return PassResult(summary, publish_telemetry=False, garm_record=fenced.record)
    if not fenced.may_run:
        # The timer goes on (``_keep_timer``), so that the wait ends at a pass of its own.
        state = _relation_state(leader, config)
        summary = Summary("waiting", fenced.waiting)
        return PassResult(
            summary,
            ports=(),
            chosen=_chosen(state, leader.peers),
            garm_record=fenced.record,
            # The wait ends by then at the latest; without a moment, at the next pass.
            requeue_at=fenced.until or inputs.now(),
        )
    admin, internal = leader.admin, leader.internal
    if admin is None or internal is None:
        summary = Summary("waiting", "Secrets created; GARM is set up on the next hook")
        return PassResult(
            summary,
            make_secrets=True,
            garm_here=LeaderGarm(config.api_port),
            garm_record=fenced.record,
        )
    state = _relation_state(leader, config)
    wanted = garm_inputs(state.units, leader.read_secret)
    running = _ensure_running(inputs, leader, config, admin, internal, wanted)
    state, reused = owners.left_out(state, running.kept, leader.configurators)
    # What the pass has come to so far; each step that stops it gives the summary.
    so_far = PassResult(
        running.stopped or Summary("active", ""),
        workload_version=running.version,
        sqlite_home=running.sqlite_home,
        chosen=_chosen(state, leader.peers),
        garm_here=_garm_here(inputs),
        garm_record=fenced.record,
        provider_record=running.record,
    )
    if running.stopped is not None:
        return so_far
    # GARM runs on this leader now: so does the timer that reconciles it
    # (``_keep_timer``), and its API port is open (``juju expose`` lets runners reach it).
    so_far = dataclasses.replace(so_far, ports=(config.api_port,))
    now, earlier = inputs.now(), leader.peers.memory
    with _client(inputs, config, admin) as client:
        setup = _ensure_setup(
            client,
            admin,
            _controller_urls(config, leader, running.tls),
            wanted,
            state,
            SetupOutcome(earlier),
            now,
            leader.peers.identity,
            _where(inputs),
        )
        memory = setup.outcome.memory
        so_far = dataclasses.replace(so_far, garm_identity=setup.identity)
        if setup.stopped is not None:
            return dataclasses.replace(
                so_far,
                summary=setup.stopped,
                memory=_changed(memory, leader.peers),
                requeue_at=_wake(setup.outcome.held),
            )
        outcome = reconcile(
            client,
            state.desired,
            now,
            config.settings,
            budget=PASS_BUDGET_SECONDS,
            observed=setup.observed,
            memory=memory,
        )
    # What setup holds back is told with what the scalesets hold back: one rule.
    outcome = dataclasses.replace(outcome, held=(*setup.outcome.held, *outcome.held))
    # So is what a reused provider name left out of the pass, with what it skipped.
    outcome = dataclasses.replace(outcome, skipped=(*outcome.skipped, *reused))
    memory = outcome.memory if outcome.memory is not None else memory
    units = len(inputs.alive or ())
    failover = failover_address(units, config.external_url, inputs.postgresql_related)
    return dataclasses.replace(
        so_far,
        summary=summarise(outcome, state, [*running.problems, *wanted.problems, *failover]),
        outcome=outcome,
        publish_back=published(state, outcome, dict(outcome.current), leader.configurators.apps),
        memory=_changed(memory, leader.peers),
        garm_here=_garm_here(inputs, answered=True),
        requeue_at=_wake(outcome.held, outcome.wake, now if outcome.cut_short else None),
    )


def _wake(held: tuple[Held, ...], *moments: datetime | None) -> datetime | None:
    """The first moment a pass can make progress again, None when nothing waits on time.

    A write held back is due when its back-off ends, setup's and the scalesets' alike
    (``garm.refusals``); each of ``moments`` is another (None: none).
    """
    due = [h.refusal.retry_at for h in held] + [m for m in moments if m is not None]
    return min(due, default=None)


def _fence(inputs: Inputs, leader: LeaderInputs) -> fence.Fence:
    """Whether this leader may run GARM now, first of all its steps (``juju.tenancy``).

    Only on a shared database (PostgreSQL, related or configured): on sqlite no other
    unit can run GARM on this data. The config is not needed to decide: with one that
    does not read, the lease already recorded is renewed, so that a typo does not stop
    GARM.
    """
    paths = inputs.machine.paths
    if not _on_postgresql(inputs):
        tenancy.unfenced(paths)
        return fence.Fence(True)
    peers, config = leader.peers, _usable(leader)
    alive = inputs.alive
    unseen = None if alive is None else set(alive) - peers.joined - {inputs.unit}
    return tenancy.hold(
        paths,
        inputs.unit,
        peers.running,
        unseen,
        config.reconcile_interval if config else None,
        inputs.asked,
        inputs.now(),
    )


def _on_postgresql(inputs: Inputs) -> bool:
    return workload.on_postgresql(inputs.machine.paths.config_file, inputs.postgresql_related)


def _keep_timer(
    inputs: Inputs, config: CharmConfig | None, fenced: fence.Fence, *, runs: bool
) -> int:
    """The reconcile timer as this pass leaves it: its interval, 0 for none or as it was.

    The timer is what renews GARM's lease between hooks, so while a lease is held the
    lease decides the pace (``fence.pace``), however the pass ended: right after
    ``reconcile-interval`` is raised the lease is still the old length and so is the
    pace, until the next pass takes the longer one. Without a lease (on sqlite) the timer
    runs at ``reconcile-interval`` while GARM runs (``runs``), and 0 removes it; while the
    fence waits it never stops, so that the wait ends at a pass. Otherwise it is left.
    """
    if fenced.lease:
        interval = fence.pace(fenced.lease)
    elif config is not None and not fenced.may_run:
        interval = config.reconcile_interval or fence.PACE_WITHOUT_TIMER
    elif config is not None and runs:
        interval = config.reconcile_interval
    else:
        return 0
    timer.keep(inputs.machine.paths, inputs.unit, interval)
    return interval


def _changed(memory: Refusals, peers: PeerRecords) -> Refusals | None:
    """The memory to write to the peer relation, None when it is what is there.

    What is there must also read whole: a hand edit is written over, once.
    """
    return None if memory == peers.memory and peers.memory_whole else memory


def _chosen(state: RelationState, peers: PeerRecords) -> entities.Memory | None:
    """Which of org and repo each unit means, to write to the peer relation; None: as is.

    Kept however the pass ends, so that the next one compares with what this one read.
    """
    same = dict(state.chosen) == dict(peers.entities) and peers.entities_whole
    return None if same else state.chosen


def _usable(leader: LeaderInputs | None) -> CharmConfig | None:
    return None if leader is None or isinstance(leader.config, ConfigError) else leader.config


def _garm_here(inputs: Inputs, *, answered: bool = False) -> LeaderGarm | None:
    """The leader's GARM for the collector; its metrics token is renewed only if it answered.

    ``answered``: GARM answered this pass. The collector scrapes GARM as GARM is
    configured on this machine, over HTTPS once it serves it (``workload.local_api``),
    checked against the CA the charm's own client checks it by.
    """
    leader = inputs.leader
    config = _usable(leader)
    if leader is None or config is None:
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
    with _client(inputs, config, admin) as client:
        return client.get_metrics_token()


def _relation_state(leader: LeaderInputs, config: CharmConfig) -> RelationState:
    """What the configurators ask for, with what every runner is set up with."""
    seen = leader.configurators
    host = urlsplit(_base_url(config, leader)).hostname or ""
    runner = dataclasses.replace(seen.runner, garm_host=host)
    return relation_state(seen.related, seen.units, seen.view, runner, leader.peers.entities)


def _base_url(config: CharmConfig, leader: LeaderInputs, tls: ServingTls | None = None) -> str:
    """The URL runners reach GARM at: configured, or this unit's address (``garm.tls``).

    https when GARM serves ``tls``.
    """
    address = None if config.external_url else leader.address  # network-get only if needed
    return runner_url(config.external_url, address, config.api_port, tls is not None)


def _controller_urls(
    config: CharmConfig, leader: LeaderInputs, tls: ServingTls | None
) -> ControllerUrls:
    """GARM's controller URLs, and the CA runners are to trust GARM by.

    From the certificate GARM serves (``tls``), the one ``_serving`` chose, which is not
    always the one just issued.
    """
    bundle = b"" if tls is None else tls.runner_bundle()
    return ControllerUrls.from_base(_base_url(config, leader, tls), bundle)


def _where(inputs: Inputs) -> str:
    """Where GARM's data is, as its configuration on this machine names it."""
    database = workload.configured_database(inputs.machine.paths.config_file)
    return where(database, inputs.unit)


def _client(
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


# --- GARM on this machine -------------------------------------------------------------


@dataclass(frozen=True)
class _OnMachine:
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


def _ensure_running(
    inputs: Inputs,
    leader: LeaderInputs,
    config: CharmConfig,
    admin: AdminLogin,
    internal: InternalSecrets,
    wanted: GarmInputs,
) -> _OnMachine:
    """Install, configure and (re)start GARM as needed, then wait for it to answer."""
    machine = inputs.machine
    installed = _install(machine, leader.resource)
    if isinstance(installed, Summary):
        return _OnMachine(stopped=installed)
    version, changed = installed
    ready = _serving(inputs, leader, config)
    if ready.stop:
        return _OnMachine(
            version, stopped=Summary("blocked" if ready.blocked else "waiting", ready.stop)
        )
    tls = ready.tls
    files = workload.read_provider_files(machine.paths.config_dir)
    current = workload.configured_database(machine.paths.config_file)
    # GARM's scalesets before it is reconfigured: read once, and only when a choice
    # comes to hang on them.
    live = cache(lambda: _live_scalesets(inputs, config, admin))
    placed = _place_data(inputs, leader, current, live)
    if placed.stopped is not None or placed.database is None:
        return _OnMachine(version, placed.sqlite_home, stopped=placed.stopped)
    # What the last leader recorded wins over this machine's files (``garm.providers``).
    recorded = leader.provider_record
    owned = owners.published(wanted.providers, leader.configurators)
    kept = kept_providers(owned, recorded, files, lambda: _providers_of(live()))
    for name in kept.dropped:
        logger.info("provider %s is no longer used: removed from GARM", name)
    garm_config = GarmConfig(
        port=config.api_port,
        jwt_secret=internal.jwt_secret,
        db_passphrase=internal.db_passphrase,
        database=placed.database,
        providers=kept.providers,
        proxy=leader.proxy,
        provider_executable=str(machine.paths.provider_binary),
        config_dir=str(machine.paths.config_dir),
        tls=tls,
    )
    changed |= _configure(machine, garm_config)
    if changed and (warning := plain_http_warning(_base_url(config, leader, tls))):
        logger.warning("%s", warning)
    answering = _start(inputs, config, changed)
    record = kept.to_write(recorded)
    problems = placed.problems
    if ready.refused:  # told while the pass goes on with the certificate served
        problems = (*problems, UnitProblem("certificates", ready.refused, True))
    return _OnMachine(version, placed.sqlite_home, problems, answering, kept, record, tls)


def _install(
    machine: Machine, attached: Callable[[str], Path | None]
) -> tuple[str, bool] | Summary:
    """The resources checked and installed: GARM's version, and whether a binary changed."""
    paths = machine.paths
    workload.ensure_directory(paths.charm_dir, None)
    workload.ensure_user()  # the resources are checked as GARM's user
    sources: dict[str, resources.Prepared] = {}
    for name in resources.NAMES:
        path = attached(name)
        if path is None:
            message = f"Attach the {name} resource: juju attach-resource garm {name}=<file>"
            return Summary("blocked", message)
        try:
            sources[name] = resources.prepare_once(name, path, paths.staging, machine.user)
        except resources.ResourceError as exc:
            logger.error("%s", exc)
            return Summary("blocked", str(exc))
    changed = workload.install_binary(sources["garm"].path, paths.binary)
    changed |= workload.install_binary(
        sources["garm-provider-openstack"].path, paths.provider_binary
    )
    workload.ensure_directory(paths.data_dir, machine.user)
    return sources["garm"].version or "", changed


@dataclass(frozen=True)
class _Placement:
    """Where GARM's data is to be, what that asks of the peer relation, what to report."""

    database: Database | None = None
    sqlite_home: HomeChange = None
    problems: tuple[UnitProblem, ...] = ()
    stopped: Summary | None = None


def _place_data(
    inputs: Inputs,
    leader: LeaderInputs,
    current: Database | None,
    live: Callable[[], list[ScaleSet] | None],
) -> _Placement:
    """GARM's database (``garm.database``), and whether this unit may run GARM on it.

    ``current`` is the database GARM's configuration names now. A unit that never ran
    GARM (no configuration written yet) must not start one, on sqlite or on a database that is
    new to it, while another unit's sqlite data holds the scalesets
    (``juju.lifecycle.sqlite_tenancy``).
    """
    paths, peers = inputs.machine.paths, leader.peers
    answer = leader.postgresql
    choice = choose_database(
        current,
        inputs.postgresql_related,
        answer,
        live() if moving_to_postgresql(current, answer) else None,
        SqliteDatabase(str(paths.sqlite_file)),
    )
    if choice.database is None:
        return _Placement(stopped=Summary("waiting", choice.waiting))
    problems = [UnitProblem("postgresql", choice.problem, choice.blocking)]
    problems = problems if choice.problem else []
    on_sqlite = isinstance(choice.database, SqliteDatabase)
    home: HomeChange = None
    if on_sqlite or not paths.config_file.exists():
        sqlite = sqlite_tenancy(peers.home, inputs.unit, peers.holders, inputs.alive)
        if on_sqlite and sqlite.claim:
            home = "claim"
        if not sqlite.may_run:
            return _Placement(sqlite_home=home, stopped=Summary("blocked", sqlite.problem))
        if on_sqlite and sqlite.problem:
            problems.append(UnitProblem(inputs.unit, sqlite.problem, True))
    if not on_sqlite and peers.home == inputs.unit:
        home = "forget"
    return _Placement(choice.database, home, tuple(problems))


def _configure(machine: Machine, garm_config: GarmConfig) -> bool:
    """GARM's files and systemd unit written as rendered; whether anything changed."""
    paths = machine.paths
    changed = workload.write_files(paths.config_dir, render_files(garm_config), machine.user)
    unit = render_unit(
        str(paths.binary),
        str(paths.config_file),
        str(paths.data_dir),
        machine.user,
        privileged_port=garm_config.port < FIRST_UNPRIVILEGED_PORT,
        # On a shared database GARM may start only while its lease holds (juju.tenancy).
        lease_check=(
            str(paths.lease_script)
            if isinstance(garm_config.database, PostgresqlDatabase)
            else None
        ),
    )
    return workload.ensure_service(paths.unit_file, unit) or changed


def _serving(inputs: Inputs, leader: LeaderInputs, config: CharmConfig) -> Readiness:
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
    (``juju.tenancy``), otherwise once systemd's start limit window has passed since the
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


def _providers_of(scalesets: list[ScaleSet] | None) -> set[str] | None:
    return None if scalesets is None else {s.provider_name for s in scalesets}


def _live_scalesets(
    inputs: Inputs, config: CharmConfig, admin: AdminLogin
) -> list[ScaleSet] | None:
    """GARM's scalesets as it runs now, or None when it cannot tell (not running yet)."""
    try:
        with _client(inputs, config, admin) as client:
            return client.list_scalesets()
    except (GarmUnreachable, GarmApiError):
        return None


# --- GARM's setup ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Setup:
    """GARM's setup as this pass left it.

    ``stopped`` is the status when the pass cannot go on (GARM unreachable, a read
    refused, no admin or URLs yet); otherwise ``observed`` is GARM as it then stands,
    which the scaleset pass reuses so a pass reads each list once. ``outcome`` holds the
    memory of refusals and the writes held back, told with the scalesets' own.
    ``identity`` is the GARM to record as the charm's, stopped or not (None: as it is).
    """

    outcome: SetupOutcome
    observed: Observed | None = None
    stopped: Summary | None = None
    identity: Identity | None = None


def _ensure_setup(
    client: Garm,
    admin: AdminLogin,
    urls: ControllerUrls,
    wanted: GarmInputs,
    state: RelationState,
    so_far: SetupOutcome,
    now: datetime,
    recorded: Identity | None,
    here: str,
    log: Log = setup_logger,
) -> _Setup:
    """Admin, controller URLs, credentials and orgs/repos, each write through the memory.

    Only on the GARM the charm set up (``recorded``; ``here`` is where GARM's database is
    now): another one, or an empty one where one was recorded, gets no write at all, its
    first run included, until the operator adopts it (``garm.identity``).
    """
    found: Identity | None = None
    try:
        have = read_controller(client)
        refused = refusal(recorded, have.controller_id if have else None, here)
        if refused:
            log.warning("%s", refused)
            return _Setup(so_far, stopped=Summary("blocked", refused))
        so_far, have = ensure_controller(client, have, admin, urls, so_far, now, log)
        found = to_record(recorded, have.controller_id, here) if have else None
        if so_far.unreachable is not None or not so_far.ready:
            return _Setup(so_far, stopped=_setup_stopped(so_far, state), identity=found)
        observed = observe(client)
        actions = plan_setup(
            wanted.credentials,
            wanted.entities,
            wanted.published,
            client.list_credentials(),
            observed.entities,
            observed.scalesets,
            complete=state.desired.complete,
        )
        before = len(so_far.done)
        so_far = apply_setup(client, actions, so_far, now, log)
        if so_far.unreachable is not None:
            return _Setup(so_far, stopped=_setup_stopped(so_far, state), identity=found)
        if len(so_far.done) > before:
            observed = dataclasses.replace(
                observed,
                entities=(*client.list_organizations(), *client.list_repositories()),
            )
    except GarmUnreachable as exc:
        summary = Summary("waiting", f"GARM unreachable, will retry: {exc}")
        return _Setup(so_far, stopped=summary, identity=found)
    except GarmApiError as exc:
        if exc.status == 401:
            summary = Summary("blocked", "GARM refused the admin login kept by the charm")
            return _Setup(so_far, stopped=summary, identity=found)
        log.error("GARM setup failed: %s", exc)
        summary = Summary("waiting", f"GARM setup failed, will retry: {exc.cause}")
        return _Setup(so_far, stopped=summary, identity=found)
    return _Setup(so_far, observed, identity=found)


def _setup_stopped(setup: SetupOutcome, state: RelationState) -> Summary:
    """The status of a pass its setup ended: GARM gone, or a write it needs held back."""
    if setup.unreachable is not None:
        return Summary("waiting", f"GARM unreachable, will retry: {setup.unreachable}")
    return summarise(Outcome(held=setup.held), state)
