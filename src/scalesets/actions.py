"""What a plan is made of: GARM as observed, the writes a plan asks for, what it reports.

The planner's vocabulary, shared by the planner (``planner``), the pass that applies its
plans (``reconciler``) and what reads its outcome (the status line, the metrics,
publish-back). Each write knows its key in the one memory of refusals (``write_keys``),
so the planner holds back and the reconciler remembers by the same names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from garm.models import Entity, Instance, ScaleSet, Template
from garm.refusals import Held, Refusals, digest, request_digest
from runners.templates import DeleteTemplate, TemplateAction
from scalesets.naming import generation_index


@dataclass(frozen=True)
class Observed:
    """What GARM holds, from a constant number of list calls, and what a pass learnt.

    ``refusals`` is what GARM refused before and this pass (``garm.refusals``): no
    write it holds back is planned. ``taken``: names GitHub holds (lower-cased,
    remembered for an hour). ``templates`` come without bodies.
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
    """A scaleset as the operator reads it: its logical name, then GARM's.

    ``ci (ci-24ec4a)``. GARM names are opaque (``ci-small`` and ``ci-large`` both show
    as ``ci-xxxxxx`` under a 10-byte budget), so the logical name leads; either alone
    when the other is not known, or the same (a legacy scaleset).
    """
    if not logical_name:
        return scaleset
    if not scaleset or scaleset.lower() == logical_name.lower():
        return logical_name
    return f"{logical_name} ({scaleset})"


def logical_name_of(scaleset: ScaleSet) -> str | None:
    """The logical name a scaleset no spec names was made for, when that can be told.

    A generation carries its logical name as a label and is named after it, which
    ``generation_index`` checks; anything else (a legacy or foreign scaleset) tells
    nothing beyond its own name.
    """
    return next(
        (label for label in scaleset.labels if generation_index(label, scaleset) is not None),
        None,
    )


@dataclass(frozen=True)
class Progress:
    """A changeover still under way, of a logical scaleset or of an ``orphan``.

    ``scaleset`` is the GARM name the phase is about: the generation being created,
    the predecessor being replaced (the least advanced one), or the orphan being
    removed; "" while a create has no name yet. ``logical_name`` is the spec's name, or
    for an orphan the one it was made for when that can be told (``logical_name_of``),
    else None. ``blocked`` is set when it will not move on by itself: the cause and
    what to do.
    """

    logical_name: str | None
    scaleset: str
    phase: Phase
    runners: int = 0
    blocked: str = ""
    orphan: bool = False

    @property
    def names(self) -> str:
        """The logical name, then GARM's: ``ci (ci-24ec4a)`` (``shown_name``)."""
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

    ``blocking`` marks what only the operator can fix (bad data, a duplicate name), as
    opposed to what resolves itself (GARM not yet configured for a provider or org).
    """

    source: str
    name: str
    reason: str
    blocking: bool = False


# The scaleset writes name the logical scaleset they serve (``logical_name``), for the
# operator: None for an orphan whose logical name cannot be told. It only describes the
# write, so it takes no part in equality: two actions writing the same are equal.


@dataclass(frozen=True)
class CreateScaleset:
    """Create the current generation of a logical scaleset under its org or repo."""

    logical_name: str
    entity: Entity
    body: dict[str, Any]

    @property
    def name(self) -> str:
        """The generation name being created."""
        return self.body["name"]


@dataclass(frozen=True)
class UpdateScaleset:
    """Change some fields of one scaleset; ``changes`` holds only what differs."""

    scaleset_id: int
    name: str
    changes: dict[str, Any]
    purpose: str
    logical_name: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RemoveInstance:
    """Remove one runner: a force-removal, or a refresh (``force`` False).

    Forced: a runner of a retired scaleset past its drain deadline, or one that failed.
    A refresh removes an idle runner of the current generation made before a change that
    new runners get, with GARM's ordinary delete: GitHub refuses it while a job runs, so
    a runner that took one since it was read keeps it (docs/adr/0010).
    """

    instance_name: str
    scaleset_id: int
    scaleset_name: str
    logical_name: str | None = field(default=None, compare=False)
    force: bool = True


@dataclass(frozen=True)
class DeleteScaleset:
    """Delete a retired scaleset that holds no instance."""

    scaleset_id: int
    name: str
    logical_name: str | None = field(default=None, compare=False)


Action = CreateScaleset | UpdateScaleset | RemoveInstance | DeleteScaleset | TemplateAction


# The cause noted when GARM answered a delete 200 and kept the scaleset (GitHub refused).
KEPT_CAUSE = "GARM answered the delete but kept it (GitHub refused)"


def write_keys(action: Action) -> list[tuple[str, str]]:
    """Which writes an action is, and what each asks for: keys and digests in the refusals.

    A field update is one write per field (``field_key``), so a field GARM refuses holds
    back that field alone; a re-enable, a retirement, a note, a delete and the
    force-removal or refresh of one runner are one write each (a runner whose job still
    runs holds back no other); a template is written by name.
    The digest says what is asked, so a refusal holds nothing back once the spec asks
    for something else.
    """
    if isinstance(action, CreateScaleset):
        return [(f"create:{action.logical_name.lower()}", request_digest(action.body))]
    if isinstance(action, UpdateScaleset):
        if action.purpose == "update":
            fields = [f for f in action.changes if f != "extended_state"] or ["extended_state"]
            return [(field_key(action.name, f), digest(action.changes[f])) for f in fields]
        # Without the notes: they are stamped "now", which would make every pass's
        # re-enable, retirement or note a new request that no refusal holds back.
        asked = {k: v for k, v in action.changes.items() if k != "extended_state"}
        return [(f"{action.purpose}:{action.name.lower()}", digest(asked))]
    if isinstance(action, RemoveInstance):
        # A refresh refused (a job started) says nothing of a force-removal, nor back.
        kind = "remove" if action.force else "refresh"
        return [(f"{kind}:{action.scaleset_name.lower()}:{action.instance_name}", "")]
    if isinstance(action, DeleteScaleset):
        return [(f"delete:{action.name.lower()}", "")]
    if isinstance(action, DeleteTemplate):
        return [(f"template-delete:{action.name}", "")]
    return [(f"template:{action.name}", digest(action.description))]


def field_key(scaleset: str, field_name: str) -> str:
    """The refusals' key of one field's update on one scaleset."""
    return f"update:{scaleset.lower()}:{field_name}"


@dataclass(frozen=True)
class Plan:
    """The writes to do now, in order, and what is still under way.

    ``current`` names, per logical scaleset (lower-cased), its current generation in
    GARM: the live one, or the one being created. ``wake`` is the earliest moment at
    which something the plan waits on is due (a listener open, a back-off over, a drain
    deadline, a runner expected to report), so that a pass then can go on; None when
    nothing waits on time (controller-runtime's ``RequeueAfter``, as a moment).
    ``waits`` are the keys of what the plan waits on GARM to do, which the memory of
    refusals times (``Refusals.waiting``): past its deadline, a wait is put to the operator.
    ``whole``: the plan looked at every family (none held, contested or partly seen, no
    unit's name unknown), so a wait it does not name is over; otherwise it may be one it
    did not look at, and its clock stands. ``phases`` is each retiring scaleset's own
    phase by GARM id, where ``progress`` tells a family's least advanced one; ``stuck``
    is what will not move on by itself, by GARM id (both for ``scalesets.fleet``).
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


def least_advanced(phases: list[Phase]) -> Phase | None:
    """The least advanced of the phases of a family's predecessors; None: none."""
    for phase in (
        Phase.HANDING_OVER,
        Phase.RETIRING,
        Phase.FORCE_REMOVING,
        Phase.DRAINING,
        Phase.AWAITING_DELETION,
    ):
        if phase in phases:
            return phase
    return None
