"""One status line from a pass: what an operator reads in ``juju status``.

Juju shows a single message per unit, so everything is composed into one line, the
problem the operator must act on first. Kept pure so every wording can be tested.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from juju.relation import RelationState, UnitProblem
from scalesets.actions import Phase, Progress, Skipped, shown_name
from scalesets.reconciler import Outcome
from scalesets.spec import HeldSpec, ScalesetSpec, application_of

StatusKind = Literal["active", "maintenance", "waiting", "blocked"]
# Past this many named problems the rest are counted, to keep the line readable.
MAX_NAMED = 2
BEING_REMOVED = "Being removed: this unit changes no scaleset any more"


def refuse_action(leads: bool, dying: bool, action: str) -> str:
    """Why an action cannot run on this unit now; "" when it can: every action's guard.

    Every action reads or changes what the leader's GARM is, so each runs on the leader
    alone, and none on a leader being removed: its GARM serves on until its stop hook,
    but nothing it starts may outlive it (a new GARM, a record another leader reads).
    """
    if not leads:
        return f"Run this on the leader unit: juju run garm/leader {action}"
    return BEING_REMOVED if dying else ""


@dataclass(frozen=True)
class Summary:
    """The status a pass earns: its kind and the message."""

    kind: StatusKind
    message: str


def _join(items: list[str]) -> str:
    shown = "; ".join(items[:MAX_NAMED])
    more = len(items) - MAX_NAMED
    return f"{shown}; and {more} more" if more > 0 else shown


def summarise(
    outcome: Outcome, state: RelationState, problems: Sequence[UnitProblem] = ()
) -> Summary:
    """Status for a finished pass.

    ``blocked`` only when the operator must act (no configurator related, a unit's data
    invalid or duplicated, GitHub refusing a create for good, a changeover that will not
    move on by itself: ``Progress.blocked``); ``waiting`` when the next hook may fix it
    by itself (GARM unreachable or refusing, a unit still publishing); ``active``
    otherwise — a
    changeover in progress included: every label is served while it runs, so nothing
    that waits for ``active`` should be held up by hours of draining. ``problems`` are
    those of GARM's own setup (providers, credentials) per unit.

    A generation whose runners keep failing (``describe_failing``) does not change the
    kind: it is told after the changeovers, or after ``N scalesets in sync``, and beside
    a problem in the brackets with them.
    """
    progress = _join([describe_progress(p) for p in outcome.progress])
    failing = _join(describe_failing(outcome, state))
    problem = _problem(outcome, state, problems)
    if problem is not None:
        kind, message = problem
        context = _parts(progress, failing)
        return Summary(kind, f"{message} ({context})" if context else message)
    if progress:
        return Summary("active", _parts(progress, failing))
    serving = len(
        _scalesets(state.desired.specs, state.desired.held) - _scalesets(outcome.skipped)
    )
    noun = "scaleset" if serving == 1 else "scalesets"
    return Summary("active", _parts(f"{serving} {noun} in sync", failing))


def _parts(*parts: str) -> str:
    """The parts of a message that say something, in order."""
    return "; ".join(part for part in parts if part)


def describe_failing(outcome: Outcome, state: RelationState) -> list[str]:
    """The logical scalesets whose current generation keeps failing, one item each.

    ``ci (ci-768c7d): 2 runners failing``: some of its runners are in error or failed
    to start and none is idle or running a job (``scalesets.reconciler.Runners.keeps_failing``).
    Such a generation serves nothing while GARM counts its runners; the status stays
    ``active`` (GARM keeps trying, and the other scalesets serve) but says so. The
    logical name is shown as the configurator spelt it.
    """
    spelt = {s.name.lower(): s.name for s in state.desired.specs}
    lines = []
    for runners in outcome.runners:
        if runners.keeps_failing:
            names = shown_name(
                spelt.get(runners.logical_name, runners.logical_name), runners.scaleset
            )
            count = runners.failing
            lines.append(f"{names}: {count} runner{'' if count == 1 else 's'} failing")
    return lines


def _scalesets(*groups: Iterable[HeldSpec | ScalesetSpec | Skipped]) -> set[tuple[str, str]]:
    """Logical scalesets as (application, name): an application's units publish one."""
    return {(application_of(i.source), i.name.lower()) for group in groups for i in group}


def describe_progress(progress: Progress) -> str:
    """One changeover as the operator reads it, the logical name first, then GARM's.

    ``Creating scaleset ci (ci-768c7d)``, ``Replacing scaleset ci (ci-24ec4a): draining
    1 runner`` (the GARM name is the generation being replaced), ``Removing scaleset
    ci-large (ci-9f8e7d): awaiting deletion`` (an orphan; its GARM name alone when the
    logical name it was made for cannot be told), ``Refreshing scaleset ci (ci-768c7d): 2
    idle runners made before its last change`` (no changeover: docs/adr/0010).
    """
    if progress.orphan or progress.logical_name is None:
        return f"Removing scaleset {progress.names}: {progress.describe()}"
    if progress.phase is Phase.CREATING:
        return f"Creating scaleset {progress.names}"
    if progress.phase is Phase.REFRESHING:
        count = progress.runners
        runners = f"{count} idle runner{'' if count == 1 else 's'}"
        return f"Refreshing scaleset {progress.names}: {runners} made before its last change"
    return f"Replacing scaleset {progress.names}: {progress.describe()}"


def _problem(
    outcome: Outcome, state: RelationState, problems: Sequence[UnitProblem]
) -> tuple[StatusKind, str] | None:
    """The most pressing problem of a pass, most severe first, or None."""
    blocked = _blocked(outcome, state, problems)
    if blocked is not None:
        return "blocked", blocked
    if outcome.unreachable is not None:
        return "waiting", f"GARM unreachable, will retry: {outcome.unreachable}"
    # A refused write is told as held back (below); a refused read has nothing to hold.
    refused = [e for e in outcome.errors if not e.blocking and e.action is None]
    if refused:
        count = len(refused)
        noun = "call" if count == 1 else "calls"
        return "waiting", f"GARM refused {count} {noun}: {refused[0].error}"
    retrying = [h.describe() for h in outcome.held if not h.refusal.blocked]
    if retrying:
        return "waiting", _join(retrying) + "; will retry"
    if not state.desired.complete:
        return "waiting", f"Waiting for {state.unseen}: nothing it may serve is retired until then"
    waiting = [f"{s.source}: {s.reason}" for s in outcome.skipped if not s.blocking]
    waiting += [f"{p.unit}: {p.reason}" for p in problems if not p.blocking]
    waiting += [f"{unit}: no scaleset published yet" for unit in state.silent]
    if waiting:
        return "waiting", "Waiting for " + _join(waiting)
    return None


def _blocked(
    outcome: Outcome, state: RelationState, problems: Sequence[UnitProblem]
) -> str | None:
    """What only the operator can fix, most severe first, or None."""
    if not state.related and state.desired.complete:
        return "Integrate with garm-configurator: juju integrate garm garm-configurator"
    blocking = [f"{s.source}: {s.reason}" for s in outcome.skipped if s.blocking]
    blocking += [f"{p.unit}: {p.reason}" for p in problems if p.blocking]
    if state.desired.template_hold:
        blocking.append(state.desired.template_hold)
    blocking += [e.error for e in outcome.errors if e.blocking]
    if blocking:
        return "Fix " + _join(blocking)
    # A changeover that is stuck says what to do about it, which the refusal holding it
    # does not: it is told instead of that refusal, and before every other.
    stuck = [p for p in outcome.progress if p.blocked]
    refused = [
        f"Fix {h.describe()}"
        for h in outcome.held
        if h.refusal.blocked and not any(p.scaleset in h.write for p in stuck)
    ]
    if stuck:
        told = [f"{p.logical_name or p.scaleset}: {p.blocked}" for p in stuck]
        return "Stuck: " + _join(told + refused)
    if refused:
        return _join(refused)
    return None
