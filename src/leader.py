"""The pass every hook runs: from what Juju told it to what the charm tells Juju back.

A unit being removed stands down: it changes no scaleset any more (ADR 0002). One that
does not lead stands by: GARM runs on the leader alone. The leader leads (``run``,
``_lead``): the fence (may it run GARM now), its config checked once and its secrets,
GARM on this machine (``juju.machine``), GARM's setup (``juju.garm_setup``), the
scalesets (``reconcile``; only read while ``paused``: ADR 0014), and what it all comes
to, told once in the ``PassResult``.

There is no ops here: the charm reads Juju into ``Inputs`` and writes the result back.
A step that cannot go on says why, and the pass stops there with what it has done.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from garm import requeue, workload
from garm.client import GarmApiError, GarmClient, GarmUnreachable
from garm.identity import adoption
from garm.recording import Garm, SimulatedGarm
from garm.refusals import Refusals
from garm.setup import NO_ADMIN_YET, AdminLogin, read_controller
from garm.tls import ServingTls
from juju import fence, garm_setup, machine, owners, status
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
from scalesets import fleet, planner
from scalesets.reconciler import Outcome, observe, reconcile, remembered

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A whole pass stops starting writes after this long; update-status picks up the rest.
PASS_BUDGET_SECONDS = 60.0
STANDING_BY = "Standing by: the leader unit runs GARM"
# The wait the memory of refusals times while ``paused`` (ADR 0014): since when.
PAUSED = "paused"


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


@dataclass(frozen=True)
class _Reads:
    """The leader's reads that every use of GARM needs, usable."""

    leader: LeaderInputs
    config: CharmConfig
    admin: AdminLogin


def _asked(inputs: Inputs, action: str) -> _Reads | ActionAnswer:
    """The leader's reads for ``action``, or why it cannot run (as its failure)."""
    refused = refuse_action(inputs, action)
    if refused or inputs.leader is None:
        return ActionAnswer(failure=refused)
    leader = inputs.leader
    config, admin = leader.config, leader.admin
    if isinstance(config, ConfigError):
        return ActionAnswer(failure=f"Invalid config: {config}")
    if admin is None:
        return ActionAnswer(failure=NO_ADMIN_YET)
    return _Reads(leader, config, admin)


def _read(inputs: Inputs, asked: _Reads, read: Callable[[GarmClient], T]) -> T | ActionAnswer:
    """What ``read`` makes of GARM, or the action's failure when GARM cannot be read."""
    try:
        with machine.client(inputs, asked.config, asked.admin) as client:
            return read(client)
    except GarmUnreachable as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc}")
    except GarmApiError as exc:
        return ActionAnswer(failure=f"Could not read GARM: {exc.cause}")


def show_scalesets(inputs: Inputs) -> ActionAnswer:
    """The ``show-scalesets`` action: GARM's scalesets by generation (``scalesets.fleet``).

    One read of GARM, planned as the next pass would plan it (writing nothing), so each
    phase shown is the one the pass acts on.
    """
    asked = _asked(inputs, "show-scalesets")
    if isinstance(asked, ActionAnswer):
        return asked
    now = inputs.now()
    seen = _read(inputs, asked, observe)
    if isinstance(seen, ActionAnswer):
        return seen
    seen = remembered(seen, asked.leader.peers.memory, now)
    desired = machine.relation_state(asked.leader, asked.config, inputs.app).desired
    planned = planner.plan(desired, seen, now, asked.config.settings)
    rows = fleet.generations(seen, planned, (s.name for s in desired.specs))
    return ActionAnswer(fleet.results(rows, planned.held, now))


def plan(inputs: Inputs) -> ActionAnswer:
    """The ``plan`` action: every write the next pass would make, made by none."""
    asked = _asked(inputs, "plan")
    if isinstance(asked, ActionAnswer):
        return asked
    leader, config, memory = asked.leader, asked.config, asked.leader.peers.memory
    state = machine.relation_state(leader, config, inputs.app)
    now, wanted = inputs.now(), garm_inputs(state.units, leader.read_secret)
    ready = machine.serving(inputs, leader, config)
    if ready.stop:
        return ActionAnswer(failure=f"The next pass would stop: {ready.stop}")
    # The pass's own steps over a GARM that is read, never written.
    went = _read(
        inputs,
        asked,
        lambda client: _garm(
            SimulatedGarm(client, now), inputs, asked, wanted, state, ready.tls, now, memory
        ),
    )
    if isinstance(went, ActionAnswer):
        return went
    _, planned = went
    if isinstance(planned, Summary):
        return ActionAnswer(failure=f"The next pass would stop: {planned.message}")
    if planned.unreachable is not None:
        return ActionAnswer(failure=f"Could not read GARM: {planned.unreachable}")
    # The planner tells every skipped spec, the held ones of the relation's data too.
    skipped = [f"{s.source}: {s.name or 'its scaleset'}: {s.reason}" for s in planned.skipped]
    return ActionAnswer(
        {
            "writes": str(len(planned.setup) + len(planned.done)),
            "setup": "\n".join(w.line() for w in planned.setup) or "none",
            "actions": "\n".join(a.line() for a in planned.done) or "none",
            "phases": "\n".join(describe_progress(p) for p in planned.progress) or "converged",
            # Writes GARM refused before, waiting out their back-off: not sent.
            "held": "\n".join(h.describe() for h in planned.held) or "none",
            "skipped": "\n".join(skipped) or "none",
            # What the pass would stop at: a write the charm cannot even make, or its
            # budget spent (the next pass goes on from there).
            "errors": "\n".join(e.error for e in planned.errors) or "none",
            "cut-short": "yes" if planned.cut_short else "no",
            # While paused, these are what the resume would do (ADR 0014).
            "paused": "yes" if config.paused else "no",
            "next-pass": _next_pass(
                requeue.wake(planned.held, planned.wake, now if planned.cut_short else None),
                now,
                config,
            ),
        }
    )


def _next_pass(at: datetime | None, now: datetime, config: CharmConfig) -> str:
    """When the pass after the next would come: early (``garm.requeue``), or as it comes.

    As ``run`` decides it: early only when that comes before the reconcile timer's run;
    while paused, none writes before the resume.
    """
    if config.paused:
        return "after the resume (paused)"
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
    reads = _asked(inputs, "adopt-garm")
    if isinstance(reads, ActionAnswer):
        return reads, None
    have = _read(inputs, reads, read_controller)
    if isinstance(have, ActionAnswer):
        return have, None
    here, recorded = machine.where(inputs), reads.leader.peers.identity
    taken = adoption(asked, have.controller_id if have else None, here, inputs.app)
    if taken.refused:
        return ActionAnswer(failure=taken.refused), None
    new = taken.record
    results = {
        "previous": recorded.describe() if recorded else "none",
        "adopted": new.describe() if new else f"a new, empty GARM in {here}",
        "next": f"the next pass sets it up (now: juju run {inputs.app}/leader reconcile)",
    }
    return ActionAnswer(results), new or "forget"


def refuse_action(inputs: Inputs, action: str) -> str:
    """Why a leader's action cannot run on this unit now; "" when it can."""
    return status.refuse_action(inputs.leader is not None, inputs.dying, action, inputs.app)


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
        state = machine.relation_state(leader, config, inputs.app)
        chosen = leader.peers.entities_to_write(state.chosen)
        summary, until = Summary("waiting", fenced.waiting), fenced.until or inputs.now()
        record = fenced.record
        return PassResult(summary, ports=(), chosen=chosen, garm_record=record, requeue_at=until)
    admin, internal = leader.admin, leader.internal
    if admin is None or internal is None:
        summary = Summary("waiting", "Secrets created; GARM is set up on the next hook")
        here = LeaderGarm(config.api_port)
        return PassResult(summary, make_secrets=True, garm_here=here, garm_record=fenced.record)
    state = machine.relation_state(leader, config, inputs.app)
    wanted = garm_inputs(state.units, leader.read_secret)
    on = machine.run(inputs, leader, config, admin, internal, wanted)
    state, reused = owners.left_out(state, on.kept, leader.configurators)
    summary, setup, outcome, memory, wake = on.stopped, None, None, None, None
    if summary is None and config.paused:
        # Nothing is written to GARM (ADR 0014); GARM runs on, and so does its lease. It
        # is read, so that the metrics go on telling the fleet. The waits on GARM stop
        # with the charm: each is timed afresh from the resume.
        now = inputs.now()
        memory = leader.peers.memory.waiting((PAUSED,), now)
        summary = status.paused(memory.since(PAUSED, now), inputs.app)
        with machine.client(inputs, config, admin) as client:
            outcome = reconcile(
                client, state.desired, now, config.settings, memory=memory, writing=False
            )
    elif summary is None:
        # GARM runs here now: so does the timer that reconciles it, and its API port is
        # open (``juju expose`` lets runners reach it).
        now, memory = inputs.now(), leader.peers.memory.without_wait(PAUSED)
        reads = _Reads(leader, config, admin)
        with machine.client(inputs, config, admin) as client:
            setup, went = _garm(client, inputs, reads, wanted, state, on.tls, now, memory)
        if isinstance(went, Summary):
            # The pass's ledger as GARM's setup left it when it stopped the pass.
            memory, wake = setup.writes.memory, requeue.wake(tuple(setup.writes.held))
            summary = went
        else:
            # What a reused provider name left out of the pass is told with what it skipped.
            outcome = dataclasses.replace(went, skipped=(*went.skipped, *reused))
            memory = outcome.memory
            alive, related = len(inputs.alive or ()), inputs.postgresql_related
            failover = failover_address(alive, config.external_url, related)
            problems = [*on.problems, *wanted.problems, *failover]
            summary = summarise(outcome, state, problems, app=inputs.app)
            wake = requeue.wake(outcome.held, outcome.wake, now if outcome.cut_short else None)
    apps = leader.configurators.apps
    return PassResult(
        summary,
        outcome,
        ports=None if on.stopped else (config.api_port,),
        workload_version=on.version,
        publish_back=None
        if outcome is None or config.paused
        else published(state, outcome, dict(outcome.current), apps),
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
    garm: Garm,
    inputs: Inputs,
    reads: _Reads,
    wanted: GarmInputs,
    state: RelationState,
    tls: ServingTls | None,
    now: datetime,
    memory: Refusals,
) -> tuple[garm_setup.Setup, Outcome | Summary]:
    """GARM's setup, then its scalesets from what the setup left: or why the setup stopped.

    The pass's own steps, which ``plan`` takes over a GARM that is read, never written.
    """
    leader, config = reads.leader, reads.config
    setup = garm_setup.ensure(
        garm,
        reads.admin,
        machine.controller_urls(config, leader, tls),
        wanted,
        state,
        memory,
        now,
        leader.peers.identity,
        machine.where(inputs),
        inputs.app,
    )
    if setup.stopped is not None:
        return setup, setup.stopped
    outcome = reconcile(
        garm,
        state.desired,
        now,
        config.settings,
        budget=PASS_BUDGET_SECONDS,
        observed=setup.observed,
        setup=setup.writes,
    )
    return setup, outcome
