"""The pure planner: (desired, observed, now, settings) -> the next writes and the progress.

Everything the reconciler decides is decided here, without I/O, clock or logging, so it
can be tested exhaustively. A plan holds only the steps whose preconditions are already
observed; the reconciler folds each write's answer back into the observation and plans
again, so one pass still does create, hand-over, retire and delete when nothing waits on
runners (design.md, "Converges").

A changeover, per logical scaleset:

1. the *current* generation (named after the spec) is created, or updated in place;
2. once it is live, every *predecessor* is retired in one update;
3. a retired predecessor with no instance left is deleted;
4. past the drain deadline its remaining instances are force-removed first.

Scalesets that belong to no logical name (orphans) take steps 2-4 too. Every
retirement, of a predecessor or an orphan, waits until whatever a current spec asks for
that the leaving scaleset serves is served by one live scaleset, so no job that is
asked for loses its runners. A partial view of Juju is not intent (ADR 0002): while
``Desired.complete`` is False no orphan is touched, and the families named in
``Desired.unsettled`` are neither retired nor deleted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from garm_models import Entity, Instance, ScaleSet, format_time, parse_time
from naming import (
    MAX_CANDIDATES,
    GenerationKey,
    generation_index,
    generation_name,
    is_legacy,
    normalise_labels,
    observed_key,
    spec_key,
)
from spec import Desired, ScalesetSpec, Settings, application_of, unit_order

RETIRED_STAMP_PREFIX = "retired-at="
ENABLED_STAMP_PREFIX = "enabled-at="
# GARM accepts a client delete only from these statuses (garm-api.md §3); the others
# are either already going away or cannot be removed yet.
_REMOVABLE_STATUSES = frozenset({"running", "error", "pending_delete"})


def retirement_stamp(at: datetime) -> str:
    """The ``extended_state`` written at retirement: when the drain clock started.

    GARM never writes ``extended_state`` itself, and keeps no "disabled since" of its
    own (``updated_at`` moves with GARM's bookkeeping), so the stamp lives here.
    """
    return f"{RETIRED_STAMP_PREFIX}{format_time(at)}"


def enabled_stamp(at: datetime) -> str:
    """The ``extended_state`` written when a scaleset is enabled again (a flip-flop).

    Its ``created_at`` may be days old; the hand-over timeout counts from this instead,
    so re-enabling an old generation does not count as having waited for warm capacity.
    """
    return f"{ENABLED_STAMP_PREFIX}{format_time(at)}"


def read_retirement_stamp(extended_state: str) -> datetime | None:
    """When a scaleset was retired, or None when it carries no readable stamp."""
    return _read_stamp(extended_state, RETIRED_STAMP_PREFIX)


def _read_stamp(extended_state: str, prefix: str) -> datetime | None:
    if not extended_state.startswith(prefix):
        return None
    at = parse_time(extended_state[len(prefix) :])
    return None if at.year == 1 else at


@dataclass(frozen=True)
class Observed:
    """What GARM holds, from a constant number of list calls."""

    scalesets: tuple[ScaleSet, ...] = ()
    instances: tuple[Instance, ...] = ()
    providers: frozenset[str] = frozenset()
    entities: tuple[Entity, ...] = ()


class Phase(StrEnum):
    """Where a logical scaleset (or an orphan) is in its changeover."""

    CREATING = "creating"
    CREATING_REPLACEMENT = "creating replacement"
    HANDING_OVER = "handing over"
    RETIRING = "retiring"
    DRAINING = "draining"
    AWAITING_DELETION = "awaiting deletion"
    FORCE_REMOVING = "force-removing"


@dataclass(frozen=True)
class Progress:
    """A changeover still under way; ``logical_name`` is None for an orphan."""

    logical_name: str | None
    scaleset: str
    phase: Phase
    runners: int = 0

    def describe(self) -> str:
        """The phase as an operator reads it, e.g. ``draining 3 runners``."""
        plural = "" if self.runners == 1 else "s"
        if self.phase is Phase.DRAINING:
            return f"draining {self.runners} runner{plural}"
        if self.phase is Phase.FORCE_REMOVING:
            return f"force-removing {self.runners} stuck runner{plural}"
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


@dataclass(frozen=True)
class RemoveInstance:
    """Force-remove a runner of a retired scaleset past its drain deadline."""

    instance_name: str
    scaleset_id: int
    scaleset_name: str


@dataclass(frozen=True)
class DeleteScaleset:
    """Delete a retired scaleset that holds no instance."""

    scaleset_id: int
    name: str


Action = CreateScaleset | UpdateScaleset | RemoveInstance | DeleteScaleset


@dataclass(frozen=True)
class Plan:
    """The writes to do now, in order, and what is still under way."""

    actions: tuple[Action, ...] = ()
    progress: tuple[Progress, ...] = ()
    skipped: tuple[Skipped, ...] = ()


@dataclass(frozen=True)
class _Member:
    """A live scaleset claimed by a logical name; ``index`` is None for a legacy one."""

    scaleset: ScaleSet
    index: int | None


@dataclass
class _Draft:
    """Accumulates one plan while the planner walks the families."""

    actions: list[Action] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def plan(desired: Desired, observed: Observed, now: datetime, settings: Settings) -> Plan:
    """Plan the next writes that take GARM towards ``desired``.

    Only steps whose preconditions are observed are planned; applying the plan and
    planning again on the new observation continues the changeover.
    """
    draft = _Draft()
    selection = _select(desired, observed, draft)
    families, orphans = _claim(
        observed.scalesets, [s.name for s in selection.specs], selection.held
    )
    instances = _instances_by_scaleset(observed.instances)
    taken = {s.name.lower() for s in observed.scalesets}
    ctx = _Context(instances, now, settings, desired.unsettled, draft)
    planned = [
        _plan_current(
            _Family(spec, families[spec.name.lower()], spec.name.lower() in selection.contested),
            observed,
            taken,
            ctx,
        )
        for spec in selection.specs
    ]
    cover = _Cover(
        tuple((_spec_entity(s), frozenset(spec_key(s).labels)) for s in desired.specs),
        tuple(
            (_entity_of(c.scaleset), frozenset(_served_by(c.scaleset)))
            for c in planned
            if c.live and c.scaleset is not None
        ),
    )
    for current in planned:
        _plan_predecessors(current, cover, ctx)
    for orphan in orphans if selection.sweep and desired.complete else ():
        phase = _plan_retirement(orphan, cover.covers(orphan), False, ctx)
        draft.progress.append(Progress(None, orphan.name, phase, len(instances[orphan.id])))
    return Plan(tuple(draft.actions), tuple(draft.progress), tuple(draft.skipped))


@dataclass(frozen=True)
class _Context:
    """What every step of one plan reads: runners, time, limits, and the view's state.

    ``unsettled``: families whose units may not all be seen; none of theirs is retired.
    """

    instances: dict[int, list[Instance]]
    now: datetime
    settings: Settings
    unsettled: frozenset[str]
    draft: _Draft


EntityKey = tuple[str, str]


def _entity_of(scaleset: ScaleSet) -> EntityKey:
    return (scaleset.entity_kind or "", scaleset.entity_name.lower())


def _served_by(scaleset: ScaleSet) -> set[str]:
    """The labels jobs can target a scaleset by: its tags and, as GARM sends it, its name."""
    return set(normalise_labels((*scaleset.labels, scaleset.name)))


def _spec_entity(spec: ScalesetSpec) -> EntityKey:
    return (spec.entity_kind, spec.entity_name.lower())


def _related(a: EntityKey, b: EntityKey) -> bool:
    """Whether jobs of one entity can run on the other's runners, or the other way round.

    A repository's jobs run on its own runners and on its owner organisation's.
    """
    return _serves(a, b) or _serves(b, a)


def _serves(runners: EntityKey, jobs: EntityKey) -> bool:
    """Whether runners registered at ``runners`` take jobs of ``jobs``."""
    if runners == jobs:
        return True
    (runner_kind, runner_name), (job_kind, job_name) = runners, jobs
    return (
        runner_kind == "organization"
        and job_kind == "repository"
        and job_name.partition("/")[0] == runner_name
    )


@dataclass(frozen=True)
class _Cover:
    """What current specs ask for and what live current generations serve.

    ``asked``: per current spec, its org/repo and the labels its jobs use. ``live``: per
    live current generation, its org/repo and the labels it serves.
    """

    asked: tuple[tuple[EntityKey, frozenset[str]], ...]
    live: tuple[tuple[EntityKey, frozenset[str]], ...]

    def covers(self, leaving: ScaleSet) -> bool:
        """Whether what current specs ask of a leaving scaleset live scalesets serve.

        The hand-over rule of a label change, applied to every retirement. A job needs
        one runner with all its labels, so for each current spec whose jobs the leaving
        scaleset takes, the labels it shares with that spec must all be on one live
        scaleset that takes those jobs too. What nobody asks for goes at once.
        """
        entity, labels = _entity_of(leaving), frozenset(_served_by(leaving))
        needs = {
            # The jobs both take: the repository's, when either side is one.
            (entity if entity[0] == "repository" else jobs, shared)
            for jobs, asked in self.asked
            if _related(entity, jobs) and (shared := labels & asked)
        }
        return all(
            any(_serves(runners, jobs) and shared <= served for runners, served in self.live)
            for jobs, shared in needs
        )


@dataclass(frozen=True)
class _Selection:
    """Which specs a pass acts on, and which families it must leave alone.

    ``held``: families of units whose data cannot be used now, untouched. ``contested``:
    names published by more than one unit, whose members are never retired (the operator
    must settle the duplicate first). ``sweep`` is False while some unit's name is
    unknown: any scaleset might be its, so none is treated as an orphan.
    """

    specs: list[ScalesetSpec]
    held: set[str]
    contested: set[str]
    sweep: bool


def _select(desired: Desired, observed: Observed, draft: _Draft) -> _Selection:
    """Pick the specs to act on; the rest are reported and their scalesets kept.

    Units of one application publishing one name are one scaleset (every configurator
    unit publishes its scaleset, only its leader its provider): the unit whose generation
    already serves defines it, else one whose provider GARM has, else the first by unit
    number; the others are not reported at all. Of several *applications* publishing one
    name, the one whose generation already serves wins, then the first by application;
    the others are reported as duplicates. A spec whose provider or org/repo is not
    registered in GARM yet cannot be created, but its live scalesets are kept.
    """
    held: set[str] = set()
    sweep = True
    for item in desired.held:
        draft.skipped.append(Skipped(item.source, item.name, item.reason, item.blocking))
        if item.name:
            held.add(item.name.lower())
        else:
            sweep = False
    groups: dict[str, list[ScalesetSpec]] = defaultdict(list)
    for spec in _one_per_application(desired.specs, observed):
        groups[spec.name.lower()].append(spec)
    winners: list[ScalesetSpec] = []
    contested: set[str] = set()
    for logical, group in groups.items():
        if len(group) > 1:
            contested.add(logical)
            group = sorted(group, key=lambda s: (not _serving(s, observed), _unit_order(s)))
            for loser in group[1:]:
                reason = f"duplicate scaleset name {loser.name!r}, already published by "
                draft.skipped.append(
                    Skipped(loser.source, loser.name, reason + group[0].source, blocking=True)
                )
        winners.append(group[0])
    entities = {(e.kind, e.name.lower()) for e in observed.entities}
    chosen: dict[str, ScalesetSpec] = {}
    for spec in sorted(winners, key=_unit_order):
        logical = spec.name.lower()
        if spec.provider_name not in observed.providers:
            reason = f"provider {spec.provider_name!r} is not registered in GARM yet"
        elif (spec.entity_kind, spec.entity_name.lower()) not in entities:
            reason = f"{spec.entity_kind} {spec.entity_name!r} is not registered in GARM yet"
        else:
            chosen[logical] = spec
            continue
        draft.skipped.append(Skipped(spec.source, spec.name, reason))
        held.add(logical)
    contested |= held & set(chosen)
    return _Selection(list(chosen.values()), held - set(chosen), contested, sweep)


def _one_per_application(specs: Iterable[ScalesetSpec], observed: Observed) -> list[ScalesetSpec]:
    """Of the units of one application publishing one name, the one that defines it.

    Ranking looks at every observed scaleset, so only groups of several units are ranked.
    """
    groups: dict[tuple[str, str], list[ScalesetSpec]] = defaultdict(list)
    for spec in specs:
        groups[(application_of(spec.source), spec.name.lower())].append(spec)
    return [
        group[0]
        if len(group) == 1
        else min(
            group,
            key=lambda s: (
                not _serving(s, observed),
                s.provider_name not in observed.providers,
                _unit_order(s),
            ),
        )
        for group in groups.values()
    ]


def _unit_order(spec: ScalesetSpec) -> tuple[str, int, str]:
    """Specs by their source unit, in application, then numeric unit, order."""
    return (*unit_order(spec.source), spec.name)


def _serving(spec: ScalesetSpec, observed: Observed) -> bool:
    """Whether an enabled live scaleset already is the generation this spec asks for."""
    key = spec_key(spec)
    logical = spec.name.lower()
    return any(
        s.enabled
        and observed_key(spec.name, s) == key
        and (generation_index(spec.name, s) is not None or is_legacy(spec.name, s))
        for s in observed.scalesets
        # Cheap first: a generation carries its logical name as a label, a legacy one
        # is named after it; nothing else can be this spec's.
        if s.name.lower() == logical or logical in (label.lower() for label in s.labels)
    )


def _claim(
    scalesets: Iterable[ScaleSet], logical_names: Sequence[str], held: set[str]
) -> tuple[dict[str, list[_Member]], list[ScaleSet]]:
    """Sort live scalesets into families by logical name; the rest are orphans.

    A generation carries its logical name as a label, so only the names among a
    scaleset's own labels are tried, which keeps this linear in the number of scalesets.
    A generation match wins over a legacy (exact-name) match, and specs claim in their
    order, so every scaleset has at most one owner whatever GARM's list order.
    """
    rank = {}
    for name in [*logical_names, *sorted(held)]:
        rank.setdefault(name.lower(), name)
    order = {key: i for i, key in enumerate(rank)}
    families: dict[str, list[_Member]] = defaultdict(list)
    orphans: list[ScaleSet] = []
    for scaleset in sorted(scalesets, key=lambda s: s.id):
        labelled = sorted(
            {label.lower() for label in scaleset.labels} & order.keys(), key=order.__getitem__
        )
        owner = next(
            (rank[n] for n in labelled if generation_index(rank[n], scaleset) is not None),
            rank.get(scaleset.name.lower()),
        )
        if owner is None:
            orphans.append(scaleset)
        elif owner.lower() not in held:
            families[owner.lower()].append(_Member(scaleset, generation_index(owner, scaleset)))
    return families, orphans


def _instances_by_scaleset(instances: Iterable[Instance]) -> dict[int, list[Instance]]:
    grouped: dict[int, list[Instance]] = defaultdict(list)
    for instance in instances:
        if instance.scale_set_id:
            grouped[instance.scale_set_id].append(instance)
    return grouped


def _pick_current(
    spec: ScalesetSpec, members: list[_Member], key: GenerationKey, settings: Settings
) -> ScaleSet | None:
    """The live scaleset that already is the generation the spec asks for, if any.

    An existing generation is preferred to a free lower candidate name so that a foreign
    scaleset going away never renames (and so replaces) a serving generation. A name over
    the budget is not eligible: lowering the budget replaces such generations. A legacy
    scaleset is kept as it is while its labels still match.
    """
    generations = sorted(
        (
            m
            for m in members
            if m.index is not None
            and observed_key(spec.name, m.scaleset) == key
            and len(m.scaleset.name.encode()) <= settings.name_budget
        ),
        key=lambda m: (m.index, m.scaleset.id),
    )
    if generations:
        return generations[0].scaleset
    legacy = [
        m.scaleset
        for m in members
        if m.index is None and observed_key(spec.name, m.scaleset) == key
    ]
    return min(legacy, key=lambda s: s.id) if legacy else None


@dataclass(frozen=True)
class _Family:
    """One logical scaleset: the spec that won its name and the live scalesets it has."""

    spec: ScalesetSpec
    members: list[_Member]
    contested: bool


@dataclass(frozen=True)
class _Current:
    """A family after its current generation was planned: which one it is, and if live."""

    family: _Family
    scaleset: ScaleSet | None
    live: bool


def _plan_current(family: _Family, observed: Observed, taken: set[str], ctx: _Context) -> _Current:
    """Create the family's current generation, or update it in place."""
    spec = family.spec
    key = spec_key(spec)
    current = _pick_current(spec, family.members, key, ctx.settings)
    if current is None:
        _plan_create(spec, key, observed, taken, ctx.settings, ctx.draft)
        return _Current(family, None, False)
    changes = _update_changes(spec, current, ctx.now)
    if changes:
        purpose = "update" if current.enabled else "re-enable"
        ctx.draft.actions.append(UpdateScaleset(current.id, current.name, changes, purpose))
    live = _is_live(current, spec, ctx.instances[current.id], ctx.now, ctx.settings)
    return _Current(family, current, live)


def _plan_predecessors(current: _Current, cover: _Cover, ctx: _Context) -> None:
    """Retire, drain and delete a family's predecessors once its current one serves.

    In a contested family (a duplicate name) another unit's generation may be among the
    members, so nothing serving is retired until the operator settles the duplicate.
    """
    family, serving = current.family, current.scaleset
    predecessors = [m.scaleset for m in family.members if m.scaleset is not serving]
    may_retire = current.live and not family.contested
    hold = family.spec.name.lower() in ctx.unsettled
    phases = [_plan_retirement(p, may_retire and cover.covers(p), hold, ctx) for p in predecessors]
    runners = sum(len(ctx.instances[p.id]) for p in predecessors)
    phase = _family_phase(serving, bool(predecessors), phases)
    if phase is not None and not family.contested:
        name = serving.name if serving else ""
        ctx.draft.progress.append(Progress(family.spec.name, name, phase, runners))


def _plan_create(
    spec: ScalesetSpec,
    key: GenerationKey,
    observed: Observed,
    taken: set[str],
    settings: Settings,
    draft: _Draft,
) -> None:
    """Create the generation under the first candidate name nobody else holds."""
    name = next(
        (
            candidate
            for candidate in (
                generation_name(key, i, settings.name_budget) for i in range(MAX_CANDIDATES)
            )
            if candidate.lower() not in taken
        ),
        None,
    )
    if name is None:
        draft.skipped.append(
            Skipped(
                spec.source,
                spec.name,
                "every candidate scaleset name is taken in GARM",
                blocking=True,
            )
        )
        return
    taken.add(name.lower())
    entity = next(
        e
        for e in observed.entities
        if e.kind == spec.entity_kind and e.name.lower() == spec.entity_name.lower()
    )
    draft.actions.append(CreateScaleset(spec.name, entity, create_body(spec, name, key)))


def create_body(spec: ScalesetSpec, name: str, key: GenerationKey) -> dict[str, Any]:
    """The create request: every field of the spec, enabled, labels including the name.

    GARM creates scale sets disabled unless told otherwise (garm-api.md §2.3), and the
    runner group key is hyphenated on create only. Zero values are left out, as Go would.
    """
    body: dict[str, Any] = {
        "name": name,
        "provider_name": spec.provider_name,
        "max_runners": spec.max_runners,
        "image": spec.image,
        "flavor": spec.flavor,
        "os_type": spec.os_type,
        "os_arch": spec.os_arch,
        "enabled": True,
        "labels": list(key.labels),
        "github-runner-group": spec.runner_group or "Default",
    }
    if spec.min_idle_runners:
        body["min_idle_runners"] = spec.min_idle_runners
    if spec.extra_specs:
        body["extra_specs"] = spec.extra_specs
    return body


def _update_changes(spec: ScalesetSpec, current: ScaleSet, now: datetime) -> dict[str, Any]:
    """The fields of the current generation that really differ from the spec.

    Values are compared, never key presence: GARM leaves ``min_idle_runners: 0`` and
    ``enabled: false`` off the wire, and ``from_json`` has already read them as zero.
    The runner group is ``runner_group`` on update (the hyphenated key is ignored there).
    Enabling a generation again replaces its retirement stamp with an enabled stamp.
    """
    wanted: dict[str, Any] = {
        "enabled": True,
        "image": spec.image,
        "flavor": spec.flavor,
        "os_arch": spec.os_arch,
        "max_runners": spec.max_runners,
        "min_idle_runners": spec.min_idle_runners,
        "runner_group": spec.runner_group or "Default",
    }
    have: dict[str, Any] = {
        "enabled": current.enabled,
        "image": current.image,
        "flavor": current.flavor,
        "os_arch": current.os_arch,
        "max_runners": current.max_runners,
        "min_idle_runners": current.min_idle_runners,
        "runner_group": current.runner_group or "Default",
    }
    changes = {k: v for k, v in wanted.items() if have[k] != v}
    if (spec.extra_specs or {}) != (current.extra_specs or {}):
        changes["extra_specs"] = spec.extra_specs or {}
    if not current.enabled or read_retirement_stamp(current.extended_state) is not None:
        changes["extended_state"] = enabled_stamp(now)
    return changes


def _is_live(
    current: ScaleSet,
    spec: ScalesetSpec,
    instances: list[Instance],
    now: datetime,
    settings: Settings,
) -> bool:
    """Whether the current generation can take over from its predecessors.

    Registered on GitHub and enabled; with warm capacity asked for, also holding an idle
    runner, unless the hand-over timeout has passed since it was created or last enabled
    (a quota too small for both generations must not stall the changeover).
    """
    if not current.scale_set_id or not current.enabled:
        return False
    if spec.min_idle_runners == 0 or any(i.is_idle for i in instances):
        return True
    enabled_at = _read_stamp(current.extended_state, ENABLED_STAMP_PREFIX)
    since = max(current.created_at, enabled_at or current.created_at)
    return now - since >= settings.handover_timeout


def _plan_retirement(scaleset: ScaleSet, may_retire: bool, hold: bool, ctx: _Context) -> Phase:
    """Retire, drain and delete one scaleset that is no longer wanted.

    Disabling alone does not drain in GARM (its scale-down target is
    ``min(min_idle + desired, max)``), so retirement also zeroes both counts. A scaleset
    found disabled without a readable stamp is stamped now; so is one found enabled.
    ``hold`` (a partially seen family) writes nothing: the phase is only reported.
    """
    instances, now = ctx.instances[scaleset.id], ctx.now
    if scaleset.enabled and (hold or not may_retire):
        return Phase.HANDING_OVER
    if hold:
        return Phase.DRAINING if instances else Phase.AWAITING_DELETION
    retired_at = read_retirement_stamp(scaleset.extended_state)
    changes: dict[str, Any] = {}
    if scaleset.enabled:
        changes["enabled"] = False
    if scaleset.min_idle_runners:
        changes["min_idle_runners"] = 0
    if scaleset.max_runners:
        changes["max_runners"] = 0
    if retired_at is None or scaleset.enabled:
        # Found enabled again (by hand, say), it may have taken new jobs: a fresh stamp.
        changes["extended_state"] = retirement_stamp(now)
    if changes or retired_at is None:
        ctx.draft.actions.append(UpdateScaleset(scaleset.id, scaleset.name, changes, "retire"))
        return Phase.RETIRING
    return _plan_drain(scaleset, retired_at, instances, now, ctx.settings, ctx.draft)


def _plan_drain(
    scaleset: ScaleSet,
    retired_at: datetime,
    instances: list[Instance],
    now: datetime,
    settings: Settings,
    draft: _Draft,
) -> Phase:
    """Delete a retired scaleset once empty; past the deadline, unpin its stuck runners.

    GARM refuses to delete a scaleset while any instance row exists, so a deadline that
    only retried the delete could never free one held by a stuck runner.
    """
    if not instances:
        draft.actions.append(DeleteScaleset(scaleset.id, scaleset.name))
        return Phase.AWAITING_DELETION
    deadline = settings.drain_deadline
    if not deadline or now < retired_at + deadline:
        return Phase.DRAINING
    for instance in instances:
        if instance.status in _REMOVABLE_STATUSES:
            draft.actions.append(RemoveInstance(instance.name, scaleset.id, scaleset.name))
    return Phase.FORCE_REMOVING


def _family_phase(
    current: ScaleSet | None, has_predecessors: bool, phases: list[Phase]
) -> Phase | None:
    """One phase for a logical scaleset, the least advanced of its parts."""
    if current is None or not current.scale_set_id or not current.enabled:
        return Phase.CREATING_REPLACEMENT if has_predecessors else Phase.CREATING
    if not has_predecessors:
        return None
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
