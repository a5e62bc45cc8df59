"""One reconcile pass: observe GARM, plan, apply, and say what happened.

The imperative shell around the pure planner. Observation is a constant number of list
calls whatever the number of scalesets. Each write's answer is folded back into the
observation and the planner is asked again, so a pass goes as far as GARM's answers
allow. Failures are contained as design.md says: an API error is kept against its
scaleset and the pass goes on; an unreachable GARM ends the pass at once.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from garm_client import GarmApiError, GarmClient, GarmUnreachable
from planner import (
    Action,
    CreateScaleset,
    DeleteScaleset,
    Observed,
    Plan,
    Progress,
    RemoveInstance,
    Skipped,
    UpdateScaleset,
    plan,
)
from spec import Desired, Settings

logger = logging.getLogger(__name__)

# Create, hand over, retire and delete are four rounds; the rest is headroom for a
# flip-flop (re-enable, then retire the interim generation) in the same pass.
MAX_ROUNDS = 8


@dataclass(frozen=True)
class ActionError:
    """A call GARM refused; ``action`` is None when it was one of the observing reads."""

    action: Action | None
    error: str


@dataclass(frozen=True)
class Outcome:
    """What a pass did and what is left, for status, actions and logs."""

    progress: tuple[Progress, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    done: tuple[Action, ...] = ()
    errors: tuple[ActionError, ...] = ()
    unreachable: str | None = None
    cut_short: bool = False

    @property
    def ok(self) -> bool:
        """Every planned write was accepted and GARM answered throughout."""
        return not self.errors and self.unreachable is None


def observe(client: GarmClient) -> Observed:
    """Read GARM with one list call per kind of object, never one per scaleset."""
    return Observed(
        tuple(client.list_scalesets()),
        tuple(client.list_instances()),
        frozenset(client.list_providers()),
        (*client.list_organizations(), *client.list_repositories()),
    )


def preview(client: GarmClient, desired: Desired, now: datetime, settings: Settings) -> Plan:
    """Observe and plan without writing anything: what the next pass would start with."""
    return plan(desired, observe(client), now, settings)


def reconcile(
    client: GarmClient,
    desired: Desired,
    now: datetime,
    settings: Settings,
    *,
    budget: float | None = None,
    observed: Observed | None = None,
) -> Outcome:
    """Run one pass towards ``desired`` and return its outcome; never raises for GARM.

    ``budget`` bounds the pass in seconds so a hook never hangs on a slow GARM: past it
    no further write is started, and the next hook carries on from what it observes.
    ``observed`` saves the reads when the caller has just made them.
    """
    started = time.monotonic()
    try:
        if observed is None:
            observed = observe(client)
    except GarmUnreachable as exc:
        return Outcome(unreachable=str(exc))
    except GarmApiError as exc:
        # Without a full observation nothing can be decided safely, so nothing is done.
        return Outcome(errors=(ActionError(None, str(exc)),))
    ledger = _Ledger()
    current = plan(desired, observed, now, settings)
    _log_refused(desired, current)
    try:
        for _ in range(MAX_ROUNDS):
            todo = [a for a in current.actions if _target(a) not in ledger.closed]
            if not todo:
                break
            for action in todo:
                if budget is not None and time.monotonic() - started > budget:
                    logger.warning("pass budget of %ss spent; the next hook continues", budget)
                    return ledger.outcome(current, cut_short=True)
                observed = ledger.apply(client, action, observed)
            current = plan(desired, observed, now, settings)
    except GarmUnreachable as exc:
        return ledger.outcome(current, unreachable=str(exc))
    return ledger.outcome(current)


def _log_refused(desired: Desired, current: Plan) -> None:
    """Log at error level the specs the operator must fix.

    Held specs are not repeated here: they were logged when their data was parsed.
    """
    held = {(h.source, h.name) for h in desired.held}
    for skipped in current.skipped:
        if skipped.blocking and (skipped.source, skipped.name) not in held:
            logger.error(
                "scaleset %s of %s skipped: %s", skipped.name, skipped.source, skipped.reason
            )


@dataclass
class _Ledger:
    """What a pass has done so far, and what it must not try again."""

    done: list[Action] = field(default_factory=list)
    errors: list[ActionError] = field(default_factory=list)
    closed: set[tuple[str, object]] = field(default_factory=set)

    def apply(self, client: GarmClient, action: Action, observed: Observed) -> Observed:
        """Do one write and keep its result; an unreachable GARM propagates."""
        try:
            observed = _apply(client, action, observed)
        except GarmUnreachable as exc:
            logger.error("GARM unreachable during %s: %s", describe_action(action), exc)
            raise
        except GarmApiError as exc:
            self.closed.add(_target(action))
            if isinstance(action, RemoveInstance) and exc.status == 404:
                return observed  # reaped between observing and removing: done
            logger.error("GARM refused %s: %s", describe_action(action), exc)
            self.errors.append(ActionError(action, str(exc)))
            return observed
        logger.info("done: %s", describe_action(action))
        self.done.append(action)
        if isinstance(action, DeleteScaleset):
            # Requested, not proven: the next pass's observation confirms it.
            self.closed.add(_target(action))
        return observed

    def outcome(
        self, current: Plan, *, unreachable: str | None = None, cut_short: bool = False
    ) -> Outcome:
        """The pass's outcome, progress taken from the latest plan."""
        return Outcome(
            current.progress,
            current.skipped,
            tuple(self.done),
            tuple(self.errors),
            unreachable,
            cut_short,
        )


def _target(action: Action) -> tuple[str, object]:
    """What an action acts on, so a refused write is not retried within the pass."""
    if isinstance(action, CreateScaleset):
        return ("create", action.name.lower())
    if isinstance(action, RemoveInstance):
        return ("instance", action.instance_name)
    return ("scaleset", action.scaleset_id)


def _apply(client: GarmClient, action: Action, observed: Observed) -> Observed:
    """Do one write and return the observation as GARM's answer says it now is."""
    if isinstance(action, CreateScaleset):
        created = client.create_scaleset(action.entity, action.body)
        return dataclasses.replace(observed, scalesets=(*observed.scalesets, created))
    if isinstance(action, UpdateScaleset):
        updated = client.update_scaleset(action.scaleset_id, action.changes)
        scalesets = tuple(updated if s.id == updated.id else s for s in observed.scalesets)
        return dataclasses.replace(observed, scalesets=scalesets)
    if isinstance(action, RemoveInstance):
        client.delete_instance(action.instance_name, force=True)
        instances = tuple(
            dataclasses.replace(i, status="pending_force_delete")
            if i.name == action.instance_name
            else i
            for i in observed.instances
        )
        return dataclasses.replace(observed, instances=instances)
    client.delete_scaleset(action.scaleset_id)
    return observed


def describe_action(action: Action) -> str:
    """A log line for an action: names and changed keys, never values.

    Values stay out because runner scripts may hold anything an operator pasted in.
    """
    if isinstance(action, CreateScaleset):
        return f"create scaleset {action.name} for {action.logical_name}"
    if isinstance(action, UpdateScaleset):
        keys = ", ".join(sorted(action.changes))
        return f"{action.purpose} scaleset {action.name} ({keys})"
    if isinstance(action, RemoveInstance):
        return f"force-remove runner {action.instance_name} of {action.scaleset_name}"
    return f"delete scaleset {action.name}"
