"""One reconcile pass: observe GARM, plan, apply, and say what happened.

The imperative shell around the pure planner. Observation is a constant number of list
calls whatever the number of scalesets. Each plan's writes go through the one loop
(``garm.writes``, ADR 0003), and GARM's answers are folded into the observation before
the planner is asked again, so a pass goes as far as they allow. Over
``garm.recording.SimulatedGarm`` this pass is the ``plan`` action's rehearsal.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from datetime import datetime

from garm.client import GarmApiError, GarmUnreachable
from garm.models import Instance
from garm.recording import Garm, told
from garm.refusals import Held, Refusals
from garm.writes import ActionError, Log, Write, Writes
from scalesets.actions import Observed, Plan, Progress, Skipped
from scalesets.drain import failed, working
from scalesets.notes import unread
from scalesets.planner import plan
from scalesets.spec import Desired, Settings

logger = logging.getLogger(__name__)

# Template, create, hand over, retire, delete and template delete are six rounds; the
# rest is headroom for a flip-flop (re-enable, then retire the interim generation).
MAX_ROUNDS = 10


@dataclass(frozen=True)
class Outcome:
    """What a pass did and what is left, for status, actions and logs."""

    progress: tuple[Progress, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    done: tuple[Write, ...] = ()
    errors: tuple[ActionError, ...] = ()
    unreachable: str | None = None
    cut_short: bool = False
    # What GARM refused, to remember: the pass's ledger's memory as the pass left it.
    memory: Refusals = field(default_factory=Refusals)
    # Per logical scaleset (lower-cased), its current generation's GARM name (Plan.current).
    current: tuple[tuple[str, str], ...] = ()
    # GARM as the pass last saw it, its own writes folded in; None when it could not read.
    observed: Observed | None = field(default=None, compare=False)
    # Writes held back by a refusal: GARM's setup's, then the scalesets' (Plan.held).
    held: tuple[Held, ...] = ()
    # When a pass can next make progress (Plan.wake of the pass's last plan).
    wake: datetime | None = field(default=None, compare=False)
    # GARM's setup's writes made in the pass's ledger before the scalesets' (``done``).
    setup: tuple[Write, ...] = ()

    @property
    def ok(self) -> bool:
        """Every planned write was accepted and GARM answered throughout."""
        return not self.errors and self.unreachable is None

    @property
    def runners(self) -> tuple[Runners, ...]:
        """The runners of each logical scaleset's current generation; none unread."""
        if self.observed is None:
            return ()
        ids = {s.name.lower(): s.id for s in self.observed.scalesets}
        by_scaleset: dict[int, list[Instance]] = {}
        for instance in self.observed.instances:
            by_scaleset.setdefault(instance.scale_set_id, []).append(instance)
        return tuple(
            Runners(logical, name, tuple(by_scaleset.get(ids.get(name.lower(), -1), ())))
            for logical, name in sorted(self.current)
        )


@dataclass(frozen=True)
class Runners:
    """The runners of one logical scaleset's current generation, as a pass last saw them.

    ``logical_name`` is lower-cased (``Outcome.current``); ``scaleset`` is GARM's name.
    """

    logical_name: str
    scaleset: str
    instances: tuple[Instance, ...] = ()

    @property
    def failing(self) -> int:
        """Runners in ``error``, or whose runner failed to start."""
        return sum(failed(i) for i in self.instances)

    @property
    def working(self) -> int:
        """Runners idle or running a job."""
        return sum(working(i) for i in self.instances)

    @property
    def keeps_failing(self) -> bool:
        """Some runners failed and none works: no job served, whatever GARM counts (ADR 0005)."""
        return self.failing > 0 and self.working == 0


def observe(client: Garm) -> Observed:
    """Read GARM with one list call per kind of object, never one per scaleset."""
    return Observed(
        tuple(client.list_scalesets()),
        tuple(client.list_instances()),
        frozenset(client.list_providers()),
        (*client.list_organizations(), *client.list_repositories()),
        templates=tuple(client.list_templates()),
    )


def reconcile(
    client: Garm,
    desired: Desired,
    now: datetime,
    settings: Settings,
    *,
    budget: float | None = None,
    observed: Observed | None = None,
    memory: Refusals | None = None,
    writing: bool = True,
    setup: Writes | None = None,
) -> Outcome:
    """Run one pass towards ``desired`` and return its outcome; never raises for GARM.

    ``writing`` False: GARM is read and the pass planned, nothing is sent (a paused charm,
    ADR 0014). ``budget`` (seconds) bounds the writes. ``observed`` saves the reads the
    caller has just made. ``setup`` is the pass's ledger as GARM's setup left it
    (``juju.garm_setup``), in which the scalesets' writes go on; without it, ``memory``
    is what GARM refused before. The outcome carries the memory as the pass left it.
    """
    log = told(client, logger)
    if setup is None:
        writes = Writes(now, memory or Refusals(), log, budget)
    else:
        writes = setup.go_on(log, budget)
    # What GARM's setup left in the ledger is told apart: its writes done as ``setup``,
    # what it held before the scalesets' own, its refusals never as the scalesets' errors.
    done, errors, held = len(writes.done), len(writes.errors), tuple(writes.held)
    outcome = _pass(client, desired, settings, writes, observed, writing)
    return dataclasses.replace(
        outcome,
        done=tuple(writes.done[done:]),
        errors=tuple(writes.errors[errors:]),
        memory=writes.memory,
        held=(*held, *outcome.held),
        setup=tuple(writes.done[:done]),
    )


def remembered(observed: Observed, memory: Refusals, now: datetime) -> Observed:
    """The observation with what GARM refused and which names GitHub holds, as kept."""
    return dataclasses.replace(observed, refusals=memory, taken=memory.taken_now(now))


def _folded(observed: Observed, writes: Writes) -> Observed:
    return remembered(observed, writes.memory, writes.now)


def _pass(
    client: Garm,
    desired: Desired,
    settings: Settings,
    writes: Writes,
    observed: Observed | None,
    writing: bool,
) -> Outcome:
    """Observe, plan, write in rounds; progress from the latest plan, GARM as last observed.

    Writes the last plan still holds were left for the next pass (a scaleset closed by a
    refusal, the budget spent): it is due at once, unless GARM went away. What the plan
    waits on GARM to do is remembered with when it was first seen (``Refusals.waiting``).
    """
    now = writes.now
    try:
        if observed is None:
            observed = observe(client)
    except GarmUnreachable as exc:
        return Outcome(unreachable=str(exc))
    except GarmApiError as exc:
        # Without a full observation nothing can be decided safely, so nothing is done.
        writes.log.error("GARM refused a read: %s", exc)
        writes.errors.append(ActionError(None, exc.cause))
        return Outcome()
    _log_unread(observed, writes.log)
    writes.memory = kept = writes.memory.current(now)
    observed = _folded(observed, writes)
    current = plan(desired, observed, now, settings)
    _log_refused(desired, current, frozenset(kept.refusals), writes.log)
    unreachable = None
    try:
        for _ in range(MAX_ROUNDS if writing else 0):
            todo = [a for a in current.actions if a.target() not in writes.closed]
            if not todo:
                break
            observed = _folded(writes.run(client, todo, observed), writes)
            # When the budget is spent, the status tells what GARM holds now.
            current = plan(desired, observed, now, settings)
            if writes.spent:
                break
    except GarmUnreachable as exc:
        # What GARM refused before it went away is remembered, and told, all the same.
        unreachable = str(exc)
        observed = _folded(writes.seen or observed, writes)
        current = plan(desired, observed, now, settings)
    writes.memory = writes.memory.waiting(current.waits, now, over=current.whole)
    return Outcome(
        current.progress,
        current.skipped,
        unreachable=unreachable,
        cut_short=writes.spent,
        current=current.current,
        observed=observed,
        held=current.held,
        wake=now if current.actions and unreachable is None else current.wake,
    )


def _log_unread(observed: Observed, log: Log) -> None:
    """Say once a pass which scalesets' notes could not be read: they are ignored."""
    for scaleset in observed.scalesets:
        keys = unread(scaleset.extended_state)
        if keys:
            log.warning(
                "ignored unreadable notes %s on scaleset %s; written afresh when needed",
                ", ".join(keys),
                scaleset.name,
            )


def _log_refused(
    desired: Desired, current: Plan, refused_before: frozenset[str], log: Log
) -> None:
    """Log at error level the specs the operator must fix.

    Not held specs (logged when their data was parsed), nor creates refused before (the
    refusal was logged whole when it came; each timer's pass would repeat it).
    """
    held = {(h.source, h.name) for h in desired.held}
    for skipped in current.skipped:
        if f"create:{skipped.name.lower()}" in refused_before:
            continue
        if skipped.blocking and (skipped.source, skipped.name) not in held:
            log.error(
                "scaleset %s of %s skipped: %s", skipped.name, skipped.source, skipped.reason
            )
