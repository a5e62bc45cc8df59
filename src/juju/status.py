"""One status line from a pass: Juju shows one message per unit, the most pressing first."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from juju.relation import RelationState, UnitProblem
from scalesets.actions import Phase, Progress, Skipped, shown_name
from scalesets.reconciler import Outcome
from scalesets.spec import HeldSpec, ScalesetSpec, application_of

StatusKind = Literal["active", "maintenance", "waiting", "blocked"]
# Past this many named problems the rest are counted, to keep the line readable.
MAX_NAMED = 2
# What `juju status` shows of a message without wrapping it in its table.
MAX_STATUS = 120
BEING_REMOVED = "Being removed: this unit changes no scaleset any more"


def refuse_action(leads: bool, dying: bool, action: str, app: str) -> str:
    """Why an action cannot run on this unit now; "" when it can: every action's guard.

    Actions act on the leader's GARM, and not on one being removed, whose GARM serves
    until its stop hook but may start nothing that outlives it.
    """
    if not leads:
        return f"Run this on the leader unit: juju run {app}/leader {action}"
    return BEING_REMOVED if dying else ""


# Where a line too long for `juju status` is cut, the latest first: after a part, before
# a hint, before the parentheses of the changeovers. Every message says what and where
# first, so what is cut is the detail.
CUTS = ("; ", ": ", " (")
CUT = " …"
# Where a hint's command starts: it is kept whole or not at all, since a command cut short
# may still run (``juju config garm`` without its ``paused=false``).
COMMANDS = (": juju ", " (juju ")


@dataclass(frozen=True)
class Summary:
    """The status a pass earns: its kind and the message in full."""

    kind: StatusKind
    message: str

    @property
    def line(self) -> str:
        """The message as ``juju status`` shows it: at most ``MAX_STATUS`` characters.

        A longer one is cut at its last part, hint or parentheses that fits (at a word
        when none keeps half the line), before any command that would be cut, and ends in
        `` …``; the message in full goes to the log beside it (``juju.unit.status``) and to
        the ``reconcile`` action's answer.
        """
        if len(self.message) <= MAX_STATUS:
            return self.message
        room = MAX_STATUS - len(CUT)
        head = self.message[: room + 1]  # a cut may fall just past the room's end
        at = max(head.rfind(cut, 0, room) for cut in CUTS)
        if at < room // 2:
            at = head.rfind(" ", 0, room + 1)
        if at <= 0:
            return self.message[:room] + CUT
        command = max(self.message.rfind(c, 0, at + len(c) - 1) for c in COMMANDS)
        return self.message[: command if command > 0 else at] + CUT


def paused(since: datetime, app: str) -> Summary:
    """A leader that writes nothing to GARM, since when, and how to resume (ADR 0014)."""
    return Summary(
        "maintenance",
        f"Paused since {since:%Y-%m-%d %H:%M} UTC: juju config {app} paused=false resumes",
    )


def _join(items: list[str]) -> str:
    shown = "; ".join(items[:MAX_NAMED])
    more = len(items) - MAX_NAMED
    return f"{shown}; and {more} more" if more > 0 else shown


def summarise(
    outcome: Outcome, state: RelationState, problems: Sequence[UnitProblem] = (), *, app: str
) -> Summary:
    """Status for a finished pass.

    ``blocked`` only when the operator must act; ``waiting`` when a later hook may fix it
    by itself; else ``active``, a changeover included (every label is served while it
    drains). ``problems`` are GARM's own setup's, per unit. Runners that keep failing
    change no kind: they are told after the changeovers.
    """
    progress = _join([describe_progress(p) for p in outcome.progress])
    failing = _join(describe_failing(outcome, state))
    problem = _problem(outcome, state, app, problems)
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
    return "; ".join(part for part in parts if part)


def describe_failing(outcome: Outcome, state: RelationState) -> list[str]:
    """``ci (ci-768c7d): 2 runners failing`` per generation that serves nothing."""
    spelt = {s.name.lower(): s.name for s in state.desired.specs}
    lines = []
    for runners in (r for r in outcome.runners if r.keeps_failing):
        names = shown_name(spelt.get(runners.logical_name, runners.logical_name), runners.scaleset)
        count = runners.failing
        lines.append(f"{names}: {count} runner{'' if count == 1 else 's'} failing")
    return lines


def _scalesets(*groups: Iterable[HeldSpec | ScalesetSpec | Skipped]) -> set[tuple[str, str]]:
    """Logical scalesets as (application, name): an application's units publish one."""
    return {(application_of(i.source), i.name.lower()) for group in groups for i in group}


def describe_progress(progress: Progress) -> str:
    """``Replacing scaleset ci (ci-24ec4a): draining 1 runner``, or an orphan ``Removing``."""
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
    outcome: Outcome, state: RelationState, app: str, problems: Sequence[UnitProblem]
) -> tuple[StatusKind, str] | None:
    """The most pressing problem of a pass, most severe first, or None."""
    blocked = _blocked(outcome, state, app, problems)
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
    outcome: Outcome, state: RelationState, app: str, problems: Sequence[UnitProblem]
) -> str | None:
    """What only the operator can fix, most severe first, or None."""
    if not state.related and state.desired.complete:
        return f"Integrate with garm-configurator: juju integrate {app} garm-configurator"
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
