"""The planner's vocabulary: GARM as observed, the writes a plan asks for, what it reports.

Each scaleset write is a ``garm.writes.Write`` that knows its keys in the one memory of
refusals (the planner holds back and the pass remembers by the same names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from garm.client import GarmApiError
from garm.models import FORCE_REMOVED, Entity, Instance, ScaleSet, Template
from garm.refusals import Held, Refusals, digest, is_permanent, request_digest
from garm.writes import UndoneError, Write, Writes
from runners.templates import TemplateAction
from scalesets.naming import generation_index


@dataclass(frozen=True)
class Observed:
    """What GARM holds, from a constant number of list calls, and what a pass learnt.

    No write ``refusals`` holds back is planned. ``taken``: names GitHub holds
    (lower-cased, remembered for an hour). ``templates`` come without bodies.
    """

    scalesets: tuple[ScaleSet, ...] = ()
    instances: tuple[Instance, ...] = ()
    providers: frozenset[str] = frozenset()
    entities: tuple[Entity, ...] = ()
    taken: frozenset[str] = frozenset()
    refusals: Refusals = field(default_factory=Refusals)
    templates: tuple[Template, ...] = ()


class Phase(StrEnum):
    """Where a logical scaleset (or an orphan) is in its changeover.

    ``REFRESHING`` is no changeover: the current generation serves, alone, and its idle
    runners made before a change that new runners get are replaced one at a time.
    """

    CREATING = "creating"
    CREATING_REPLACEMENT = "creating replacement"
    HANDING_OVER = "handing over"
    RETIRING = "retiring"
    DRAINING = "draining"
    AWAITING_DELETION = "awaiting deletion"
    FORCE_REMOVING = "force-removing"
    REFRESHING = "refreshing"


def shown_name(logical_name: str | None, scaleset: str) -> str:
    """``ci (ci-24ec4a)``: GARM names are opaque, so the logical name leads; one if the same."""
    if not logical_name:
        return scaleset
    if not scaleset or scaleset.lower() == logical_name.lower():
        return logical_name
    return f"{logical_name} ({scaleset})"


def logical_name_of(scaleset: ScaleSet) -> str | None:
    """The logical name of a generation no spec names: a label it is named after."""
    return next(
        (label for label in scaleset.labels if generation_index(label, scaleset) is not None),
        None,
    )


@dataclass(frozen=True)
class Progress:
    """A changeover still under way, of a logical scaleset or of an ``orphan``.

    ``scaleset`` is the GARM name the phase is about: the generation being created, the
    (least advanced) predecessor being replaced, or the orphan; "" while a create has no
    name yet. ``logical_name`` is None for an orphan whose logical name cannot be told.
    ``blocked``: why it will not move on by itself, and what to do.
    """

    logical_name: str | None
    scaleset: str
    phase: Phase
    runners: int = 0
    blocked: str = ""
    orphan: bool = False

    @property
    def names(self) -> str:
        """``ci (ci-24ec4a)`` (``shown_name``)."""
        return shown_name(self.logical_name, self.scaleset)

    def describe(self) -> str:
        """The phase as an operator reads it, e.g. ``draining 3 runners``."""
        plural = "" if self.runners == 1 else "s"
        if self.phase is Phase.DRAINING:
            return f"draining {self.runners} runner{plural}"
        if self.phase is Phase.FORCE_REMOVING:
            return f"force-removing {self.runners} stuck runner{plural}"
        if self.phase is Phase.REFRESHING:
            return f"refreshing {self.runners} idle runner{plural}"
        return self.phase.value


@dataclass(frozen=True)
class Skipped:
    """A spec left out of this pass, with why; its live scalesets are untouched.

    ``blocking``: only the operator can fix it (bad data, a duplicate name).
    """

    source: str
    name: str
    reason: str
    blocking: bool = False


# A write's ``logical_name`` (None for an orphan's) only describes it for the operator:
# it takes no part in equality, two actions writing the same are equal.


@dataclass(frozen=True)
class CreateScaleset(Write):
    """Create the current generation of a logical scaleset under its org or repo."""

    logical_name: str
    entity: Entity
    body: dict[str, Any]

    @property
    def name(self) -> str:
        """The generation's name."""
        return self.body["name"]

    def asks(self) -> list[tuple[str, str]]:
        """By logical name: a refusal holds back the family's create, whatever its name."""
        return [(f"create:{self.logical_name.lower()}", request_digest(self.body))]

    def line(self) -> str:
        """``create scaleset ci (ci-768c7d)``."""
        return f"create scaleset {shown_name(self.logical_name, self.name)}"

    def target(self) -> object:
        """The generation."""
        return ("create", self.name.lower())

    def send(self, garm: Any, seen: Observed, writes: Writes) -> Observed:
        """GARM's answer joins the observation."""
        created = garm.create_scaleset(self.entity, self.body)
        return replace(seen, scalesets=(*seen.scalesets, created))

    def on_refusal(self, exc: GarmApiError, writes: Writes, garm: Any, seen: Observed) -> Observed:
        """A name GitHub holds moves the create on to the next candidate."""
        if not exc.name_taken:
            return super().on_refusal(exc, writes, garm, seen)
        writes.log.warning("GitHub already holds scaleset name %s: %s", self.name, exc.cause)
        writes.memory = writes.memory.taking(self.name.lower(), writes.now)
        return seen


@dataclass(frozen=True)
class UpdateScaleset(Write):
    """Change some fields of one scaleset; ``changes`` holds only what differs."""

    scaleset_id: int
    name: str
    changes: dict[str, Any]
    purpose: str
    logical_name: str | None = field(default=None, compare=False)

    def asks(self) -> list[tuple[str, str]]:
        """One write per field of an update; a re-enable, retirement or note is one.

        Those are asked without the notes, stamped "now": else each pass's would be a new
        request that no refusal holds back.
        """
        if self.purpose == "update":
            fields = [f for f in self.changes if f != "extended_state"] or ["extended_state"]
            return [(field_key(self.name, f), digest(self.changes[f])) for f in fields]
        asked = {k: v for k, v in self.changes.items() if k != "extended_state"}
        return [(f"{self.purpose}:{self.name.lower()}", digest(asked))]

    def line(self) -> str:
        """``retire scaleset ci (ci-24ec4a): enabled, …``: keys, never values."""
        keys = ", ".join(sorted(self.changes))
        return f"{self.purpose} scaleset {shown_name(self.logical_name, self.name)}: {keys}"

    def target(self) -> object:
        """The scaleset; its notes alone are apart (they are written whatever else)."""
        return ("notes" if self.purpose == "note" else "scaleset", self.scaleset_id)

    def send(self, garm: Any, seen: Observed, writes: Writes) -> Observed:
        """One PUT; GARM's answer replaces the scaleset in the observation."""
        updated = garm.update_scaleset(self.scaleset_id, self.changes)
        scalesets = tuple(updated if s.id == updated.id else s for s in seen.scalesets)
        return replace(seen, scalesets=scalesets)

    def on_refusal(self, exc: GarmApiError, writes: Writes, garm: Any, seen: Observed) -> Observed:
        """An update of several fields refused is sent again one field at a time.

        So a field GARM refuses is held back alone. The notes go with ``extra_specs``
        (which they describe) if sent, else with the first field.
        """
        fields = [f for f in self.changes if f != "extended_state"]
        if self.purpose != "update" or len(fields) < 2:
            return super().on_refusal(exc, writes, garm, seen)
        writes.log.error("GARM refused to %s: %s", self.line(), exc)
        notes_with = "extra_specs" if "extra_specs" in fields else fields[0]
        notes = {k: v for k, v in self.changes.items() if k == "extended_state"}
        for name in fields:
            changes = {name: self.changes[name], **(notes if name == notes_with else {})}
            seen = writes.send(garm, replace(self, changes=changes), seen)
        return seen


@dataclass(frozen=True)
class RemoveInstance(Write):
    """Remove one runner: forced (past its drain deadline, or failed), or a refresh.

    A refresh removes an outdated idle runner with GARM's ordinary delete, which GitHub
    refuses while a job runs: a runner that took one since it was read keeps it
    (docs/adr/0010).
    """

    instance_name: str
    scaleset_id: int
    scaleset_name: str
    logical_name: str | None = field(default=None, compare=False)
    force: bool = True

    def asks(self) -> list[tuple[str, str]]:
        """One runner's; a refresh refused (a job started) holds back no force-removal."""
        kind = "remove" if self.force else "refresh"
        return [(f"{kind}:{self.scaleset_name.lower()}:{self.instance_name}", "")]

    def line(self) -> str:
        """``force-remove runner garm-x of ci (ci-24ec4a)``, or ``refresh runner …``."""
        verb = "force-remove" if self.force else "refresh"
        names = shown_name(self.logical_name, self.scaleset_name)
        return f"{verb} runner {self.instance_name} of {names}"

    def target(self) -> object:
        """The runner."""
        return ("instance", self.instance_name)

    def send(self, garm: Any, seen: Observed, writes: Writes) -> Observed:
        """A DELETE of the runner, which GARM then removes: noted on it as seen."""
        garm.delete_instance(self.instance_name, force=self.force)
        status = FORCE_REMOVED if self.force else "pending_delete"
        instances = tuple(
            replace(i, status=status, updated_at=writes.now) if i.name == self.instance_name else i
            for i in seen.instances
        )
        return replace(seen, instances=instances)

    def on_refusal(self, exc: GarmApiError, writes: Writes, garm: Any, seen: Observed) -> Observed:
        """A runner reaped meanwhile is done; a refused refresh (it took a job) never blocks.

        The operator hears of it only if it keeps coming (docs/adr/0010).
        """
        if exc.status != 404:
            writes.refuse(self, exc, is_permanent(exc.status) and self.force)
        return seen


@dataclass(frozen=True)
class DeleteScaleset(Write):
    """Delete a retired scaleset that holds no instance."""

    scaleset_id: int
    name: str
    logical_name: str | None = field(default=None, compare=False)

    def asks(self) -> list[tuple[str, str]]:
        """By GARM's name."""
        return [(f"delete:{self.name.lower()}", "")]

    def line(self) -> str:
        """``delete scaleset ci (ci-24ec4a)``."""
        return f"delete scaleset {shown_name(self.logical_name, self.name)}"

    def target(self) -> object:
        """The scaleset."""
        return ("scaleset", self.scaleset_id)

    def send(self, garm: Any, seen: Observed, writes: Writes) -> Observed:
        """The DELETE, then a read: kept (GitHub refused, GARM answered 200) is a refusal.

        docs/reference/garm-api.md §2.6.
        """
        garm.delete_scaleset(self.scaleset_id)
        if garm.get_scaleset(self.scaleset_id) is not None:
            raise UndoneError(KEPT_CAUSE)
        return replace(
            seen, scalesets=tuple(s for s in seen.scalesets if s.id != self.scaleset_id)
        )


Action = CreateScaleset | UpdateScaleset | RemoveInstance | DeleteScaleset | TemplateAction


KEPT_CAUSE = "GARM answered the delete but kept it (GitHub refused)"


def field_key(scaleset: str, field_name: str) -> str:
    """The refusals' key of one field's update on one scaleset."""
    return f"update:{scaleset.lower()}:{field_name}"


@dataclass(frozen=True)
class Plan:
    """The writes to do now, in order, and what is still under way.

    ``current``: each logical scaleset's (lower-cased) current generation in GARM, live or
    being created. ``wake``: when the earliest thing the plan waits on is due (a listener,
    a back-off, a drain deadline, a runner to report), None if nothing waits on time
    (controller-runtime's ``RequeueAfter``, as a moment). ``waits``: the keys of what it
    waits on GARM to do, which ``Refusals.waiting`` times and puts to the operator past
    its deadline. ``whole``: every family was looked at (none held, contested or partly
    seen, no unit's name unknown), so a wait it does not name is over; else that wait's
    clock stands. ``phases`` (each retiring scaleset's own) and ``stuck`` are by GARM id,
    for ``scalesets.fleet``.
    """

    actions: tuple[Action, ...] = ()
    progress: tuple[Progress, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    current: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    held: tuple[Held, ...] = ()
    wake: datetime | None = field(default=None, compare=False)
    waits: tuple[str, ...] = field(default=(), compare=False)
    whole: bool = field(default=True, compare=False)
    phases: Mapping[int, Phase] = field(default_factory=dict, compare=False)
    stuck: Mapping[int, str] = field(default_factory=dict, compare=False)


def family_phase(
    current: ScaleSet | None, has_predecessors: bool, phases: list[Phase]
) -> Phase | None:
    """One phase for a logical scaleset, the least advanced of its parts.

    A current generation found disabled is a flip-flop: nothing is created; re-enabled
    (or its re-enable held back, which the status tells), it hands over like a new one.
    """
    if current is None or not current.scale_set_id:
        return Phase.CREATING_REPLACEMENT if has_predecessors else Phase.CREATING
    if not has_predecessors:
        return None
    if not current.enabled:
        return Phase.HANDING_OVER
    return least_advanced(phases)


# A predecessor's phases, least advanced first.
_RETIREMENT = (
    Phase.HANDING_OVER,
    Phase.RETIRING,
    Phase.FORCE_REMOVING,
    Phase.DRAINING,
    Phase.AWAITING_DELETION,
)


def least_advanced(phases: list[Phase]) -> Phase | None:
    """The least advanced of the phases of a family's predecessors; None: none."""
    return next((phase for phase in _RETIREMENT if phase in phases), None)
