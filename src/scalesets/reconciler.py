"""One reconcile pass: observe GARM, plan, apply, and say what happened.

The imperative shell around the pure planner. Observation is a constant number of list
calls whatever the number of scalesets. Each write's answer is folded back into the
observation and the planner is asked again, so a pass goes as far as GARM's answers
allow. Failures are contained: an API error is kept against its scaleset and the pass
goes on; an unreachable GARM ends the pass at once.

Some answers are facts the planner acts on rather than errors: a delete answered 200
is confirmed with one read, and a scaleset GARM kept is noted on it; a force-removal
GARM refused is noted the same way; a name GitHub already holds moves the create on to
the next candidate; a refused create is remembered (``refusals``), so none of
them is re-sent on every pass (ADR 0003).

``preview`` is the same pass over a GARM that is read for real and written to in
imagination (``preview.SimulatedGarm``), so the ``plan`` action tells every write the
pass would make, those that earlier writes unlock included, and can never drift from it.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from garm.client import GarmApiError, GarmClient, GarmUnreachable
from garm.models import FORCE_REMOVED, Instance
from garm.refusals import Held, Refusals, is_permanent
from runners.scripts import TemplateError, derive_template
from runners.templates import CreateTemplate, DeleteTemplate, UpdateTemplate
from scalesets.actions import (
    KEPT_CAUSE,
    Action,
    CreateScaleset,
    DeleteScaleset,
    Observed,
    Plan,
    Progress,
    RemoveInstance,
    Skipped,
    UpdateScaleset,
    shown_name,
    write_keys,
)
from scalesets.drain import failed, working
from scalesets.notes import unread
from scalesets.planner import plan
from scalesets.preview import Rehearsal, SimulatedGarm
from scalesets.spec import Desired, Settings

logger = logging.getLogger(__name__)
_Log = logging.Logger | logging.LoggerAdapter[logging.Logger]

# Template, create, hand over, retire, delete and template delete are six rounds; the
# rest is headroom for a flip-flop (re-enable, then retire the interim generation).
MAX_ROUNDS = 10


@dataclass(frozen=True)
class ActionError:
    """A call GARM refused; ``action`` is None when it was one of the observing reads.

    ``error`` is the refusal's short cause, fit for a status line; the log has it whole.
    A write GARM refused is remembered too (``garm.refusals``), and told from there as
    held back (``Outcome.held``).
    ``blocking`` marks a write the charm could not even make, for a cause in GARM that
    only the operator can remove (a base template it cannot build on).
    """

    action: Action | None
    error: str
    blocking: bool = False


@dataclass(frozen=True)
class Outcome:
    """What a pass did and what is left, for status, actions and logs."""

    progress: tuple[Progress, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    done: tuple[Action, ...] = ()
    errors: tuple[ActionError, ...] = ()
    unreachable: str | None = None
    cut_short: bool = False
    # What GARM refused, to remember, when this pass changed it (else None).
    memory: Refusals | None = None
    # Per logical scaleset (lower-cased), its current generation's GARM name (Plan.current).
    current: tuple[tuple[str, str], ...] = ()
    # GARM as the pass last saw it, its own writes folded in; None when it could not read.
    observed: Observed | None = field(default=None, compare=False)
    # Writes GARM refused before, held back by their back-off (Plan.held).
    held: tuple[Held, ...] = ()
    # When a pass can next make progress (Plan.wake of the pass's last plan).
    wake: datetime | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """Every planned write was accepted and GARM answered throughout."""
        return not self.errors and self.unreachable is None

    @property
    def runners(self) -> tuple[Runners, ...]:
        """The runners of each logical scaleset's current generation, by logical name.

        Empty when GARM could not be read. A generation still being created has none.
        """
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
    A generation *keeps failing* when some of its runners failed (``drain.failed``)
    and none works (``drain.working``): it serves no job, whatever GARM's own count of
    runners says (docs/adr/0005).
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
        """Some runners failed and none works."""
        return self.failing > 0 and self.working == 0


# What a pass asks of GARM: GARM itself, or the preview's stand-in for it.
Garm = GarmClient | SimulatedGarm


def observe(client: Garm) -> Observed:
    """Read GARM with one list call per kind of object, never one per scaleset."""
    return Observed(
        tuple(client.list_scalesets()),
        tuple(client.list_instances()),
        frozenset(client.list_providers()),
        (*client.list_organizations(), *client.list_repositories()),
        templates=tuple(client.list_templates()),
    )


@dataclass(frozen=True)
class Preview:
    """What the next pass would do, told without writing anything.

    Its writes in order, and its outcome as the pass's last plan would see it
    (``progress``, ``skipped``). ``errors`` are writes the charm could not even make (a
    base template it cannot build on); ``cut_short`` says the pass budget would end the
    pass there; ``held`` are the writes GARM refused before that wait out their back-off;
    ``wake`` is when the pass after it could make progress (``Plan.wake``).
    """

    actions: tuple[Action, ...] = ()
    progress: tuple[Progress, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    errors: tuple[ActionError, ...] = ()
    cut_short: bool = False
    held: tuple[Held, ...] = ()
    wake: datetime | None = None


def preview(
    client: Garm,
    desired: Desired,
    now: datetime,
    settings: Settings,
    memory: Refusals | None = None,
    *,
    budget: float | None = None,
    observed: Observed | None = None,
) -> Preview:
    """The whole next pass, without writing anything: every write, in order.

    The pass itself runs, over a GARM read for real whose writes are answered as GARM
    would answer them (``preview.SimulatedGarm``), so the writes that earlier writes
    unlock are told too, at the same ``now`` and within the same ``budget``. Raises
    ``GarmUnreachable`` or ``GarmApiError`` when GARM cannot be read. A write GitHub
    would refuse (a delete GARM keeps, say) is told as the pass would try it: the
    preview cannot know. ``client`` may be a ``SimulatedGarm`` already written to (the
    rehearsed setup), with ``observed`` what it was read as then.
    """
    garm = client if isinstance(client, SimulatedGarm) else SimulatedGarm(client, now)
    if observed is None:
        observed = observe(garm)
    request = _Request(desired, now, settings, budget, memory)
    outcome = _pass(garm, request, observed, Rehearsal(logger, {}))
    if outcome.unreachable is not None:
        raise GarmUnreachable(outcome.unreachable)
    return Preview(
        outcome.done,
        outcome.progress,
        outcome.skipped,
        outcome.errors,
        outcome.cut_short,
        outcome.held,
        outcome.wake,
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
) -> Outcome:
    """Run one pass towards ``desired`` and return its outcome; never raises for GARM.

    ``budget`` bounds the pass in seconds so a hook never hangs on a slow GARM: past it
    no further write is started, and the next hook carries on from what it observes.
    ``observed`` saves the reads when the caller has just made them. ``memory`` is
    what GARM refused before (``garm.refusals``); the outcome carries it when this pass
    changed it.
    """
    return _pass(client, _Request(desired, now, settings, budget, memory), observed, logger)


@dataclass(frozen=True)
class _Request:
    """What a pass is asked, by ``reconcile`` and ``preview`` alike."""

    desired: Desired
    now: datetime
    settings: Settings
    budget: float | None
    memory: Refusals | None


def _pass(client: Garm, request: _Request, observed: Observed | None, log: _Log) -> Outcome:
    """The pass towards ``request``, over ``observed`` if just read; ``log`` is where it tells."""
    desired, now, settings, budget, memory = (
        request.desired,
        request.now,
        request.settings,
        request.budget,
        request.memory,
    )
    started = time.monotonic()
    try:
        if observed is None:
            observed = observe(client)
    except GarmUnreachable as exc:
        return Outcome(unreachable=str(exc))
    except GarmApiError as exc:
        # Without a full observation nothing can be decided safely, so nothing is done.
        log.error("GARM refused a read: %s", exc)
        return Outcome(errors=(ActionError(None, exc.cause),))
    _log_unread(observed, log)
    earlier = memory or Refusals()
    kept = earlier.current(now)
    ledger = _Ledger(now, kept, log, changed=kept != earlier)
    observed = ledger.folded(observed)
    current = plan(desired, observed, now, settings)
    _log_refused(desired, current, frozenset(kept.refusals), log)
    try:
        for _ in range(MAX_ROUNDS):
            todo = [a for a in current.actions if _target(a) not in ledger.closed]
            if not todo:
                break
            for action in todo:
                if ledger.holds(action):
                    continue  # refused earlier in this pass: its back-off holds it too
                if budget is not None and time.monotonic() - started > budget:
                    log.warning("pass budget of %ss spent; the next hook continues", budget)
                    # The status tells what GARM holds now, the writes done folded in.
                    current = plan(desired, observed, now, settings)
                    return ledger.outcome(current, observed, cut_short=True)
                observed = ledger.apply(client, action, observed)
            current = plan(desired, observed, now, settings)
    except GarmUnreachable as exc:
        # What GARM refused before it went away is remembered, and told, all the same.
        observed = ledger.folded(observed)
        current = plan(desired, observed, now, settings)
        return ledger.outcome(current, observed, unreachable=str(exc))
    return ledger.outcome(current, observed)


def _log_unread(observed: Observed, log: _Log) -> None:
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
    desired: Desired, current: Plan, refused_before: frozenset[str], log: _Log
) -> None:
    """Log at error level the specs the operator must fix.

    Held specs are not repeated here: they were logged when their data was parsed. Nor
    are creates refused before: the refusal was logged whole when it came, and the
    timer's pass every 30 s would repeat it for as long as it lasts.
    """
    held = {(h.source, h.name) for h in desired.held}
    for skipped in current.skipped:
        if f"create:{skipped.name.lower()}" in refused_before:
            continue
        if skipped.blocking and (skipped.source, skipped.name) not in held:
            log.error(
                "scaleset %s of %s skipped: %s", skipped.name, skipped.source, skipped.reason
            )


@dataclass
class _Ledger:
    """What a pass has done so far, what GARM refused, and what it must not try again."""

    now: datetime
    memory: Refusals
    log: _Log
    changed: bool = False
    done: list[Action] = field(default_factory=list)
    errors: list[ActionError] = field(default_factory=list)
    closed: set[tuple[str, object]] = field(default_factory=set)
    # Bodies of the base templates read this pass, by id: read once, whatever N.
    bases: dict[int, str] = field(default_factory=dict)

    def folded(self, observed: Observed) -> Observed:
        """The observation with what GARM refused and which names GitHub holds, as kept."""
        return dataclasses.replace(
            observed, refusals=self.memory, taken=self.memory.taken_now(self.now)
        )

    def apply(self, client: Garm, action: Action, observed: Observed) -> Observed:
        """Do one write and keep its result; an unreachable GARM propagates."""
        try:
            observed = _apply(
                client, action, observed, self.now, lambda i: self._base(client, i), self.log
            )
        except GarmUnreachable as exc:
            self.log.error("GARM unreachable during %s: %s", describe_action(action), exc)
            raise
        except GarmApiError as exc:
            return self._refused(client, action, exc, observed)
        except TemplateError as exc:
            self.closed.add(_target(action))
            # A base the charm cannot build on refuses every template alike: said once.
            if all(e.error != str(exc) for e in self.errors):
                self.log.error("cannot %s: %s", describe_action(action), exc)
                self.errors.append(ActionError(action, str(exc), blocking=True))
            return observed
        if isinstance(action, DeleteScaleset):
            # Asked once per pass: a kept scaleset waits out its back-off.
            self.closed.add(_target(action))
            if any(s.id == action.scaleset_id for s in observed.scalesets):
                self.log.warning("GARM kept scaleset %s after deleting it", _names(action))
                ((key, asked),) = write_keys(action)
                kept = self.memory.refused(key, asked, self.now, KEPT_CAUSE, permanent=False)
                return self._remember(kept, observed)
        self.log.info("done: %s", describe_action(action))
        self.done.append(action)
        memory = self.memory
        for key, _ in write_keys(action):
            memory = memory.accepted(key)
        return self._remember(memory, observed)

    def holds(self, action: Action) -> bool:
        """Whether the memory, as this pass left it, holds the write back."""
        return any(self.memory.holding(k, a, self.now) for k, a in write_keys(action))

    def _remember(self, memory: Refusals, observed: Observed) -> Observed:
        if memory != self.memory:
            self.memory, self.changed = memory, True
        return self.folded(observed)

    def _base(self, client: Garm, template_id: int) -> str:
        """GARM's base template body, read at most once per pass."""
        if template_id not in self.bases:
            body = client.get_template(template_id).data
            if not body:
                raise TemplateError(f"GARM sent template {template_id} without its body")
            self.bases[template_id] = body
        return self.bases[template_id]

    def _refused(
        self, client: Garm, action: Action, exc: GarmApiError, observed: Observed
    ) -> Observed:
        """Remember a refusal, so the write waits out its back-off; fold in what it tells.

        An update of several fields GARM refused is sent again one field at a time, so
        a field it refuses is held back alone and the others go.
        """
        self.closed.add(_target(action))
        if isinstance(action, RemoveInstance) and exc.status == 404:
            return observed  # reaped between observing and removing: done
        if isinstance(action, CreateScaleset) and exc.name_taken:
            self.log.warning("GitHub already holds scaleset name %s: %s", action.name, exc.cause)
            taken = self.memory.taking(action.name.lower(), self.now)
            return self._remember(taken, observed)
        self.log.error("GARM refused %s: %s", describe_action(action), exc)
        keys = write_keys(action)
        if isinstance(action, UpdateScaleset) and len(keys) > 1:
            for single in _one_field_each(action):
                observed = self.apply(client, single, observed)
            return observed
        self.errors.append(ActionError(action, exc.cause))
        # GitHub refusing a refresh means the runner took a job after it was read: nothing
        # for the operator, who hears of it only if it keeps coming (docs/adr/0010).
        refresh = isinstance(action, RemoveInstance) and not action.force
        permanent = is_permanent(exc.status) and not refresh
        memory = self.memory
        for key, asked in keys:
            memory = memory.refused(key, asked, self.now, exc.cause, permanent)
        return self._remember(memory, observed)

    def outcome(
        self,
        current: Plan,
        observed: Observed,
        *,
        unreachable: str | None = None,
        cut_short: bool = False,
    ) -> Outcome:
        """The pass's outcome: progress from the latest plan, GARM as last observed.

        Writes the last plan still holds were left for the next pass (a scaleset closed
        by a refusal of one of its fields, the budget spent): that pass is due at once,
        unless GARM went away. What the last plan waits on GARM to do is remembered with
        when it was first seen (``Refusals.waiting``), so the next pass can tell how long.
        """
        waits = self.memory.waiting(current.waits, self.now, over=current.whole)
        self._remember(waits, observed)
        wake = current.wake
        if current.actions and unreachable is None:
            wake = self.now
        return Outcome(
            current.progress,
            current.skipped,
            tuple(self.done),
            tuple(self.errors),
            unreachable,
            cut_short,
            self.memory if self.changed else None,
            current.current,
            observed,
            current.held,
            wake,
        )


def _one_field_each(update: UpdateScaleset) -> list[UpdateScaleset]:
    """An update of several fields as one update per field.

    The notes (``extended_state``) go with ``extra_specs`` when they describe it, else
    with the first field, so what they say is written with what it is about.
    """
    fields = [f for f in update.changes if f != "extended_state"]
    notes_with = "extra_specs" if "extra_specs" in fields else fields[0]
    return [
        dataclasses.replace(
            update,
            changes={
                name: update.changes[name],
                **(
                    {"extended_state": update.changes["extended_state"]}
                    if name == notes_with and "extended_state" in update.changes
                    else {}
                ),
            },
        )
        for name in fields
    ]


def _target(action: Action) -> tuple[str, object]:
    """What an action acts on, so a refused write is not retried within the pass."""
    if isinstance(action, CreateScaleset):
        return ("create", action.name.lower())
    if isinstance(action, RemoveInstance):
        return ("instance", action.instance_name)
    if isinstance(action, UpdateScaleset) and action.purpose == "note":
        return ("notes", action.scaleset_id)
    if isinstance(action, CreateTemplate | UpdateTemplate | DeleteTemplate):
        return ("template", action.name)
    return ("scaleset", action.scaleset_id)


def _apply(
    client: Garm,
    action: Action,
    observed: Observed,
    now: datetime,
    base: Callable[[int], str],
    log: _Log,
) -> Observed:
    """Do one write and return the observation as GARM's answer says it now is.

    ``base`` reads a base template's body, for a template the charm derives from it.
    """
    if isinstance(action, CreateTemplate | UpdateTemplate | DeleteTemplate):
        return _apply_template(client, action, observed, base)
    if isinstance(action, CreateScaleset):
        created = client.create_scaleset(action.entity, action.body)
        return dataclasses.replace(observed, scalesets=(*observed.scalesets, created))
    if isinstance(action, UpdateScaleset):
        updated = client.update_scaleset(action.scaleset_id, action.changes)
        scalesets = tuple(updated if s.id == updated.id else s for s in observed.scalesets)
        return dataclasses.replace(observed, scalesets=scalesets)
    if isinstance(action, RemoveInstance):
        # A refresh is GARM's ordinary delete: GitHub refuses it while a job runs.
        client.delete_instance(action.instance_name, force=action.force)
        status = FORCE_REMOVED if action.force else "pending_delete"
        instances = tuple(
            dataclasses.replace(i, status=status, updated_at=now)
            if i.name == action.instance_name
            else i
            for i in observed.instances
        )
        return dataclasses.replace(observed, instances=instances)
    client.delete_scaleset(action.scaleset_id)
    # GARM answers 200 and keeps the scale set when GitHub refuses
    # (docs/reference/garm-api.md §2.6): it stays in the observation, and the ledger notes
    # the refusal.
    if client.get_scaleset(action.scaleset_id) is not None:
        return observed
    return dataclasses.replace(
        observed, scalesets=tuple(s for s in observed.scalesets if s.id != action.scaleset_id)
    )


def _apply_template(
    client: Garm,
    action: CreateTemplate | UpdateTemplate | DeleteTemplate,
    observed: Observed,
    base: Callable[[int], str],
) -> Observed:
    """Write one of the charm's runner templates; the body is derived here, at write time.

    GARM lists templates without bodies, so the base is read only when a template of the
    charm's must be written, never on a settled pass.
    """
    others = tuple(t for t in observed.templates if t.name != action.name)
    if isinstance(action, DeleteTemplate):
        client.delete_template(action.template_id)
        return dataclasses.replace(observed, templates=others)
    text = derive_template(base(action.base_id), action.blocks)
    data = base64.b64encode(text.encode()).decode()
    if isinstance(action, CreateTemplate):
        body = {
            "name": action.name,
            "description": action.description,
            "data": data,
            "os_type": "linux",
            "forge_type": "github",
        }
        written = client.create_template(body)
    else:
        changes = {"description": action.description, "data": data}
        written = client.update_template(action.template_id, changes)
    return dataclasses.replace(
        observed, templates=(*others, dataclasses.replace(written, data=None))
    )


def describe_action(action: Action) -> str:
    """A log line for an action: names and changed keys, never values.

    A scaleset is named by its logical name, then GARM's (``shown_name``):
    ``create scaleset ci (ci-768c7d)``, ``retire scaleset ci (ci-24ec4a): enabled, …``,
    ``force-remove runner garm-x of ci (ci-24ec4a)``, ``refresh runner garm-y of ci
    (ci-768c7d)`` (an outdated idle runner removed), ``delete scaleset ci (ci-24ec4a)``.
    Values stay out because runner scripts may hold anything an operator pasted in.
    """
    if isinstance(action, CreateScaleset):
        return f"create scaleset {_names(action)}"
    if isinstance(action, UpdateScaleset):
        keys = ", ".join(sorted(action.changes))
        return f"{action.purpose} scaleset {_names(action)}: {keys}"
    if isinstance(action, RemoveInstance):
        verb = "force-remove" if action.force else "refresh"
        return f"{verb} runner {action.instance_name} of {_names(action)}"
    if isinstance(action, CreateTemplate):
        return f"create runner template {action.name} for {action.logical_name}"
    if isinstance(action, UpdateTemplate):
        return f"update runner template {action.name} for {action.logical_name}"
    if isinstance(action, DeleteTemplate):
        return f"delete runner template {action.name}"
    return f"delete scaleset {_names(action)}"


def _names(action: CreateScaleset | UpdateScaleset | RemoveInstance | DeleteScaleset) -> str:
    """The scaleset a write is on: its logical name, then GARM's."""
    name = action.scaleset_name if isinstance(action, RemoveInstance) else action.name
    return shown_name(action.logical_name, name)
