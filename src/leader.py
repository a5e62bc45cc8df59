"""The pass every hook runs: from what Juju told it to what the charm tells Juju back.

A unit being removed stands down: it changes no scaleset any more (ADR 0002). One that
does not lead stands by: GARM runs on the leader alone. The leader leads (``run``,
``_lead``): the fence (may it run GARM now), its config checked once and its secrets,
GARM on this machine (``juju.machine``), GARM's setup (``_ensure_setup``), the scalesets
(``reconcile``), and what it all comes to, told once in the ``PassResult``.

There is no ops here: the charm reads Juju into ``Inputs`` and writes the result back.
A step that cannot go on says why, and the pass stops there with what it has done.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from garm import requeue, workload
from garm.client import GarmApiError, GarmUnreachable
from garm.identity import Identity, adoption, refusal, to_record
from garm.recording import SimulatedGarm, told
from garm.setup import (
    NO_ADMIN_YET,
    AdminLogin,
    ControllerUrls,
    SetupOutcome,
    apply_setup,
    ensure_controller,
    plan_setup,
    read_controller,
)
from garm.setup import logger as setup_logger
from garm.tls import ServingTls
from juju import fence, machine, owners, status
from juju.config import CharmConfig, ConfigError
from juju.lifecycle import SQLITE_MULTI_UNIT
from juju.publish import published
from juju.records import ActionAnswer, IdentityChange, Inputs, LeaderInputs, PassResult
from juju.relation import (
    GarmInputs,
    RelationState,
    failover_address,
    garm_inputs,
)
from juju.status import BEING_REMOVED, Summary, describe_progress, summarise
from observe import endpoint
from observe.token import LeaderGarm
from scalesets.actions import Observed
from scalesets.reconciler import Garm, Outcome, observe, reconcile

logger = logging.getLogger(__name__)

# A whole pass stops starting writes after this long; update-status picks up the rest.
PASS_BUDGET_SECONDS = 60.0
STANDING_BY = "Standing by: the leader unit runs GARM"


def run(inputs: Inputs) -> PassResult:
    """One hook's pass on this unit: stand down, stand by, or lead."""
    paths, leader = inputs.machine.paths, inputs.leader
    # A dying leader keeps serving only a GARM that runs; it starts none.
    if leader is None or (inputs.dying and not workload.is_active()):
        return _stand_by(inputs)
    config = leader.config  # checked here, once: every step after takes it usable or not
    usable = config if isinstance(config, CharmConfig) else None
    if inputs.dying:
        return _serve_until_stopped(inputs, leader, usable)
    # Not knowing whether another GARM runs counts as one that may (``juju.fence``).
    fenced = machine.fence(inputs, leader, usable)
    started = time.monotonic()
    if usable is None:
        logger.error("invalid config: %s", config)
        summary = Summary("blocked", f"Invalid config: {config}")
        result = PassResult(summary, publish_telemetry=False, garm_record=fenced.record)
    else:
        result = _lead(inputs, leader, usable, fenced)
    ended = inputs.now()
    endpoint.publish(
        paths,
        result.outcome,
        ended=ended,
        duration=time.monotonic() - started,
        reconcile_interval=usable.reconcile_interval if usable else 0,
        settings=usable.settings if usable else None,
        version=result.workload_version or "",
    )
    # The timer runs whenever GARM does (its port open), counting from a run's end: the
    # one thing of the result known only once the pass has ended.
    next_due = machine.keep_timer(inputs, usable, fenced, runs=bool(result.ports), ended=ended)
    seconds = requeue.delay(result.requeue_at, ended, next_due)
    requeue.keep(paths, inputs.unit, seconds, ended)
    return dataclasses.replace(result, next_due=next_due) if next_due else result


def _serve_until_stopped(
    inputs: Inputs, leader: LeaderInputs, config: CharmConfig | None
) -> PassResult:
    """A dying leader changes no scaleset any more (ADR 0002); its GARM serves on."""
    machine.serve_on(inputs, leader, config)
    return PassResult(
        Summary("maintenance", BEING_REMOVED),
        ports=(config.api_port,) if config else None,
        # A leader whose config cannot be read leaves what it told the collector before.
        publish_telemetry=config is not None,
        garm_here=machine.garm_here(inputs, leader, config),
    )


def plan(inputs: Inputs) -> ActionAnswer:
    """The ``plan`` action: every write the next pass would make, made by none."""
    refused = refuse_action(inputs, "plan")
    if refused or inputs.leader is None:
        return ActionAnswer(failure=refused)
    leader = inputs.leader
    config = leader.config
    if isinstance(config, ConfigError):
        return ActionAnswer(failure=f"Invalid config: {config}")
    state = machine.relation_state(leader, config)
    admin = leader.admin
    if admin is None:
        return ActionAnswer(failure=NO_ADMIN_YET)
    now, wanted = inputs.now(), garm_inputs(state.units, leader.read_secret)
    ready = machine.serving(inputs, leader, config)
    if ready.stop:
        return ActionAnswer(failure=f"The next pass would stop: {ready.stop}")
    try:
        with machine.client(inputs, config, admin) as client:
            # The pass's own steps over a GARM that is read, never written: its setup,
            # then its scalesets from what the setup would leave.
            garm = SimulatedGarm(client, now)
            setup = _ensure_setup(
                garm,
                admin,
                machine.controller_urls(config, leader, ready.tls),
                wanted,
                state,
                SetupOutcome(leader.peers.memory),
                now,
                leader.peers.identity,
                machine.where(inputs),
            )
            if setup.stopped is not None:
                return ActionAnswer(failure=f"The next pass would stop: {setup.stopped.message}")
            planned = reconcile(
                garm,
                state.desired,
                now,
                config.settings,
                budget=PASS_BUDGET_SECONDS,
                observed=setup.observed,
                memory=setup.outcome.memory,
            )
    except GarmUnreachable as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc}")
    except GarmApiError as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc.cause}")
    if planned.unreachable is not None:
        return ActionAnswer(failure=f"Could not read GARM: {planned.unreachable}")
    held = (*setup.outcome.held, *planned.held)
    # The planner tells every skipped spec, the held ones of the relation's data too.
    skipped = [f"{s.source}: {s.name or 'its scaleset'}: {s.reason}" for s in planned.skipped]
    return ActionAnswer(
        {
            "writes": str(len(setup.outcome.done) + len(planned.done)),
            "setup": "\n".join(setup.outcome.done) or "none",
            "actions": "\n".join(a.line() for a in planned.done) or "none",
            "phases": "\n".join(describe_progress(p) for p in planned.progress) or "converged",
            # Writes GARM refused before, waiting out their back-off: not sent.
            "held": "\n".join(h.describe() for h in held) or "none",
            "skipped": "\n".join(skipped) or "none",
            # What the pass would stop at: a write the charm cannot even make, or its
            # budget spent (the next pass goes on from there).
            "errors": "\n".join(e.error for e in planned.errors) or "none",
            "cut-short": "yes" if planned.cut_short else "no",
            "next-pass": _next_pass(
                requeue.wake(held, planned.wake, now if planned.cut_short else None), now, config
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
        with machine.client(inputs, config, admin) as client:
            have = read_controller(client)
    except GarmUnreachable as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc}"), None
    except GarmApiError as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc.cause}"), None
    here, recorded = machine.where(inputs), leader.peers.identity
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
        "done": "\n".join(a.line() for a in done) or "none",
    }


def _stand_by(inputs: Inputs) -> PassResult:
    """A unit that does not lead: no GARM here, and say if sqlite is being shared."""
    paths = inputs.machine.paths
    record = machine.release(paths, "being removed" if inputs.dying else "not the leader")
    machine.stand_down(paths)
    if inputs.dying:
        return PassResult(Summary("maintenance", BEING_REMOVED), ports=(), garm_record=record)
    alive = inputs.alive
    crowded = not machine.on_postgresql(inputs) and alive is not None and len(alive) > 1
    summary = Summary("blocked", SQLITE_MULTI_UNIT) if crowded else Summary("active", STANDING_BY)
    return PassResult(summary, ports=(), workload_version="", garm_record=record)


# --- leading --------------------------------------------------------------------------


def _lead(
    inputs: Inputs, leader: LeaderInputs, config: CharmConfig, fenced: fence.Fence
) -> PassResult:
    """The leader's steps, in order; each one that cannot go on ends the pass."""
    if not fenced.may_run:
        # The timer goes on (``machine.keep_timer``), so that the wait ends at a pass: by
        # the fence's moment at the latest, without one at the next pass.
        chosen = leader.peers.entities_to_write(machine.relation_state(leader, config).chosen)
        summary, until = Summary("waiting", fenced.waiting), fenced.until or inputs.now()
        record = fenced.record
        return PassResult(summary, ports=(), chosen=chosen, garm_record=record, requeue_at=until)
    admin, internal = leader.admin, leader.internal
    if admin is None or internal is None:
        summary = Summary("waiting", "Secrets created; GARM is set up on the next hook")
        here = LeaderGarm(config.api_port)
        return PassResult(summary, make_secrets=True, garm_here=here, garm_record=fenced.record)
    state = machine.relation_state(leader, config)
    wanted = garm_inputs(state.units, leader.read_secret)
    on = machine.run(inputs, leader, config, admin, internal, wanted)
    state, reused = owners.left_out(state, on.kept, leader.configurators)
    summary, setup, outcome, memory, wake = on.stopped, None, None, None, None
    if summary is None:
        # GARM runs here now: so does the timer that reconciles it, and its API port is
        # open (``juju expose`` lets runners reach it).
        now = inputs.now()
        setup, went = _garm(inputs, leader, config, admin, wanted, state, on.tls, now)
        memory = setup.outcome.memory
        if isinstance(went, Summary):
            summary, wake = went, requeue.wake(setup.outcome.held)
        else:
            # What setup holds back is told with what the scalesets hold back: one rule;
            # so is what a reused provider name left out of the pass, with what it skipped.
            held, skipped = (*setup.outcome.held, *went.held), (*went.skipped, *reused)
            outcome = dataclasses.replace(went, held=held, skipped=skipped)
            memory = memory if outcome.memory is None else outcome.memory
            alive, related = len(inputs.alive or ()), inputs.postgresql_related
            failover = failover_address(alive, config.external_url, related)
            summary = summarise(outcome, state, [*on.problems, *wanted.problems, *failover])
            wake = requeue.wake(outcome.held, outcome.wake, now if outcome.cut_short else None)
    apps = leader.configurators.apps
    return PassResult(
        summary,
        outcome,
        ports=None if on.stopped else (config.api_port,),
        workload_version=on.version,
        publish_back=outcome and published(state, outcome, dict(outcome.current), apps),
        sqlite_home=on.sqlite_home,
        memory=None if memory is None else leader.peers.memory_to_write(memory),
        chosen=leader.peers.entities_to_write(state.chosen),
        garm_here=machine.garm_here(inputs, leader, config, answered=outcome is not None),
        garm_record=fenced.record,
        provider_record=on.record,
        garm_identity=setup.identity if setup else None,
        requeue_at=wake,
    )


def _garm(
    inputs: Inputs,
    leader: LeaderInputs,
    config: CharmConfig,
    admin: AdminLogin,
    wanted: GarmInputs,
    state: RelationState,
    tls: ServingTls | None,
    now: datetime,
) -> tuple[_Setup, Outcome | Summary]:
    """GARM's setup, then its scalesets, through one client: or why the setup stopped."""
    with machine.client(inputs, config, admin) as client:
        setup = _ensure_setup(
            client,
            admin,
            machine.controller_urls(config, leader, tls),
            wanted,
            state,
            SetupOutcome(leader.peers.memory),
            now,
            leader.peers.identity,
            machine.where(inputs),
        )
        if setup.stopped is not None:
            return setup, setup.stopped
        outcome = reconcile(
            client,
            state.desired,
            now,
            config.settings,
            budget=PASS_BUDGET_SECONDS,
            observed=setup.observed,
            memory=setup.outcome.memory,
        )
    return setup, outcome


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
) -> _Setup:
    """Admin, controller URLs, credentials and orgs/repos, each write through the memory.

    Only on the GARM the charm set up (``recorded``; ``here`` is where GARM's database is
    now): another one, or an empty one where one was recorded, gets no write at all, its
    first run included, until the operator adopts it (``garm.identity``).
    """
    found: Identity | None = None
    log = told(client, setup_logger)
    try:
        have = read_controller(client)
        refused = refusal(recorded, have.controller_id if have else None, here)
        if refused:
            log.warning("%s", refused)
            return _Setup(so_far, stopped=Summary("blocked", refused))
        so_far, have = ensure_controller(client, have, admin, urls, so_far, now)
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
        so_far = apply_setup(client, actions, so_far, now)
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
