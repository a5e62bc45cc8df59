"""The pure planner: (desired, observed, now, settings) -> the next writes and the progress.

Everything the reconciler decides is decided here, without I/O, clock or logging, so it
can be tested exhaustively. A plan holds only the steps whose preconditions are observed;
the reconciler folds each answer back in and plans again, so one pass can create, hand
over, retire and delete when nothing waits on runners.

A changeover, per logical scaleset:

1. the *current* generation (named after the spec) is created, or updated in place;
2. once it is live, every *predecessor* is retired in one update;
3. a retired predecessor with no instance left is deleted;
4. past the drain deadline its remaining instances are force-removed first.

Scalesets that belong to no logical name (orphans) take steps 2-4 too. Every
retirement waits until what current specs ask of the leaving scaleset is served by a
live one (``cover``). A partial view of Juju is not intent (ADR 0002): while
``Desired.complete`` is False no orphan is touched, and the families named in
``Desired.unsettled`` are neither retired nor deleted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from garm.models import FORCE_REMOVED, Instance, ScaleSet
from garm.refusals import Held, Refusal
from runners.templates import Choice, DeleteTemplate, Templates, template_name
from scalesets import registration
from scalesets.actions import (
    KEPT_CAUSE,
    Action,
    CreateScaleset,
    DeleteScaleset,
    Observed,
    Phase,
    Plan,
    Progress,
    RemoveInstance,
    Skipped,
    UpdateScaleset,
    family_phase,
    least_advanced,
    logical_name_of,
    shown_name,
)
from scalesets.cover import Cover
from scalesets.drain import (
    FORCE_STUCK,
    STUCK_RUNNER,
    delete_key,
    failed,
    force_key,
)
from scalesets.naming import (
    MAX_CANDIDATES,
    GenerationKey,
    Member,
    current_generation,
    generation_index,
    generation_name,
    is_legacy,
    observed_key,
    spec_key,
)
from scalesets.notes import Notes, specs_digest
from scalesets.refresh import REFRESH_STUCK, refresh, stamped, stuck, wait_key
from scalesets.spec import Desired, ScalesetSpec, Settings, application_of, unit_order
from scalesets.wake import Wake

# GARM accepts a client delete only from these (docs/reference/garm-api.md §3).
_REMOVABLE_STATUSES = frozenset({"running", "error", "pending_delete"})
# A runner in pending_delete is on GARM's own way out, which a failing provider retries
# with back-off: it is force-removed only once it has sat there this long, so a runner
# GARM keeps putting back is not re-sent on every pass.
PENDING_DELETE_GRACE = timedelta(minutes=5)
# GARM opens a new (or re-enabled) scale set's GitHub listener 4-4.5 s after the call
# returns (docs/reference/garm-api.md §8); before that no job for its labels is acquired
# by anyone. Counted open 8 s after: almost twice what was seen, and no longer than a
# changeover needs to hand over within 10 s of a label change (docs/benchmarks.md).
LISTENER_STARTUP = timedelta(seconds=8)
# A scale set deleted before GARM started its worker for it is re-created on GitHub by
# that late worker and left there (docs/reference/garm-api.md §8); see ADR 0003 for the figure.
YOUNGEST_DELETE = timedelta(seconds=30)


def plan(desired: Desired, observed: Observed, now: datetime, settings: Settings) -> Plan:
    """Plan the next writes that take GARM towards ``desired``."""
    instances: dict[int, list[Instance]] = defaultdict(list)
    for instance in observed.instances:
        if instance.scale_set_id:
            instances[instance.scale_set_id].append(instance)
    templates = Templates(observed.templates)
    ctx = _Context(instances, now, settings, desired.unsettled, observed, templates, Wake(now))
    selection, choices = _choose_templates(_select(desired, ctx), bool(desired.template_hold), ctx)
    families, orphans = _claim(
        observed.scalesets, [s.name for s in selection.specs], selection.held
    )
    # Names GARM holds, and names GitHub was found to hold (another manager's, or a late
    # GARM worker's): no create may take one.
    taken = {s.name.lower() for s in observed.scalesets} | observed.taken
    planned = [
        _plan_current(
            _Family(spec, families[spec.name.lower()], spec.name.lower() in selection.contested),
            choices[spec.name.lower()],
            taken,
            ctx,
        )
        for spec in selection.specs
    ]
    live = [f.scaleset for f in planned if f.live and f.scaleset is not None]
    cover = Cover.of(desired.specs, live)
    for family in planned:
        _plan_predecessors(family, cover, ctx)
    # Only a full view of Juju says what is not wanted (ADR 0002).
    sweep = selection.sweep and desired.complete
    for orphan in orphans if sweep else ():
        logical = logical_name_of(orphan)
        phase = _plan_retirement(orphan, logical, cover.covers(orphan), False, ctx)
        ctx.phases[orphan.id] = phase
        runners = len(instances[orphan.id])
        blocked = ctx.blocked.get(orphan.id, "")
        ctx.progress.append(Progress(logical, orphan.name, phase, runners, blocked, orphan=True))
    if sweep and not desired.template_hold:
        _plan_template_deletes(selection, choices, ctx)
    current = tuple((f.spec.name.lower(), f.name) for f in planned if f.name)
    # A plan that left a family alone did not look at its waits: they are not over.
    held = desired.unsettled or selection.held or selection.contested
    return Plan(
        tuple(ctx.actions),
        tuple(ctx.progress),
        tuple(ctx.skipped),
        current,
        tuple(ctx.held),
        ctx.wake.earliest(changing=bool(ctx.progress)),
        tuple(ctx.waits),
        sweep and not held,
        dict(ctx.phases),
        dict(ctx.blocked),
    )


def _waits(key: str, deadline: timedelta, ctx: _Context) -> bool:
    """Note a wait on GARM, timed by the memory of refusals; whether it is overdue.

    Until then a pass is due at its deadline, so the operator hears of it on time.
    """
    ctx.waits.append(key)
    memory, now = ctx.observed.refusals, ctx.now
    if memory.overdue(key, deadline, now):
        return True
    ctx.wake.due(memory.since(key, now) + deadline)
    return False


def _choose_templates(
    selection: _Selection, hold: bool, ctx: _Context
) -> tuple[_Selection, dict[str, Choice]]:
    """Each chosen spec's runner template by logical name, its writes planned first.

    A spec whose template cannot be made is held like an unregistered one: its live
    scalesets keep serving as they are.
    """
    choices: dict[str, Choice] = {}
    specs: list[ScalesetSpec] = []
    held = set(selection.held)
    for spec in selection.specs:
        logical = spec.name.lower()
        choice = ctx.templates.choose(spec.name, spec.template_blocks, hold=hold)
        if choice.problem:
            ctx.skipped.append(Skipped(spec.source, spec.name, choice.problem, blocking=True))
            held.add(logical)
            continue
        if choice.action is not None:
            _plan_write(choice.action, f"write runner template {choice.action.name}", ctx)
        choices[logical] = choice
        specs.append(spec)
    return replace(selection, specs=specs, held=held), choices


def _plan_template_deletes(
    selection: _Selection, choices: Mapping[str, Choice], ctx: _Context
) -> None:
    """Delete the charm's templates nothing uses and nothing asks for.

    GARM refuses to delete a template a scaleset still uses (a draining one's waits for
    its delete); a held, contested or partly seen family keeps its template.
    """
    wanted = {template_name(n) for n, c in choices.items() if c.template_id or c.action}
    wanted |= {template_name(n) for n in selection.held | selection.contested | ctx.unsettled}
    in_use = {s.template_id for s in ctx.observed.scalesets}
    for template_id, template in sorted(ctx.templates.ours.items()):
        if template.name not in wanted and template_id not in in_use:
            write = f"delete runner template {template.name}"
            _plan_write(DeleteTemplate(template_id, template.name), write, ctx)


@dataclass
class _Context:
    """One plan as the planner walks the families: what it reads, and what it gathers.

    ``unsettled``: families whose units may not all be seen; none of theirs is retired.
    Each gathered field becomes the ``Plan``'s of its name; ``blocked`` (by scaleset id:
    what will not move on by itself, and what to do) becomes ``Plan.stuck``.
    """

    instances: dict[int, list[Instance]]
    now: datetime
    settings: Settings
    unsettled: frozenset[str]
    observed: Observed
    templates: Templates
    wake: Wake
    actions: list[Action] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    blocked: dict[int, str] = field(default_factory=dict)
    held: list[Held] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)
    phases: dict[int, Phase] = field(default_factory=dict)


@dataclass(frozen=True)
class _Selection:
    """Which specs a pass acts on, and which families it must leave alone.

    ``held``: families of units whose data cannot be used now. ``contested``: names more
    than one unit publishes, whose members are never retired until the operator settles
    it. ``sweep`` False: some unit's name is unknown, so no scaleset is an orphan.
    """

    specs: list[ScalesetSpec]
    held: set[str]
    contested: set[str]
    sweep: bool


def _select(desired: Desired, ctx: _Context) -> _Selection:
    """Pick the specs to act on; the rest are reported and their scalesets kept.

    Units of one application publishing one name are one scaleset (every configurator
    unit publishes its scaleset, only its leader its provider): the unit whose generation
    already serves defines it, else one whose provider GARM has, else the first by unit
    number; the others are not reported at all. Of several *applications* publishing one
    name, the one whose generation already serves wins, then the first by application;
    the others are reported as duplicates. A spec whose provider or org/repo is not
    registered in GARM yet cannot be created, but its live scalesets are kept.
    """
    observed = ctx.observed
    ctx.skipped += [Skipped(h.source, h.name, h.reason, h.blocking) for h in desired.held]
    held = {h.name.lower() for h in desired.held if h.name}
    sweep = all(h.name for h in desired.held)
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
                ctx.skipped.append(
                    Skipped(loser.source, loser.name, reason + group[0].source, blocking=True)
                )
        winners.append(group[0])
    entities = {(e.kind, e.name.lower()) for e in observed.entities}
    chosen: dict[str, ScalesetSpec] = {}
    for spec in sorted(winners, key=_unit_order):
        logical = spec.name.lower()
        lacking = registration.missing(spec, observed.providers, entities)
        if lacking is None:
            chosen[logical] = spec
            continue
        key, kind, name = lacking
        overdue = _waits(key, registration.REGISTRATION_STUCK, ctx)
        reason = registration.reason(kind, name, overdue)
        ctx.skipped.append(Skipped(spec.source, spec.name, reason, blocking=overdue))
        held.add(logical)
    contested |= held & set(chosen)
    return _Selection(list(chosen.values()), held - set(chosen), contested, sweep)


def _one_per_application(specs: Iterable[ScalesetSpec], observed: Observed) -> list[ScalesetSpec]:
    """Of the units of one application publishing one name, the one that defines it.

    Ranking reads every observed scaleset, so a group of one is not ranked.
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
    key, logical = spec_key(spec), spec.name.lower()
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
) -> tuple[dict[str, list[Member]], list[ScaleSet]]:
    """Sort live scalesets into families by logical name; the rest are orphans.

    Only the names among a scaleset's own labels are tried (a generation carries its
    logical name as one), which keeps this linear. A generation match wins over a legacy
    (exact-name) one, and specs claim in their order: one owner whatever GARM's order.
    """
    rank = {}
    for name in [*logical_names, *sorted(held)]:
        rank.setdefault(name.lower(), name)
    order = {key: i for i, key in enumerate(rank)}
    families: dict[str, list[Member]] = defaultdict(list)
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
            legacy = generation_index(owner, scaleset) is None
            families[owner.lower()].append(Member(scaleset, legacy))
    return families, orphans


@dataclass(frozen=True)
class _Family:
    """One logical scaleset: the spec that won its name and the live scalesets it has.

    Once its current generation is planned: that one (``scaleset``), whether it is live,
    and its GARM ``name`` (the current generation's, or the one this plan creates; "" while
    no create can be planned).
    """

    spec: ScalesetSpec
    members: list[Member]
    contested: bool
    scaleset: ScaleSet | None = None
    live: bool = False
    name: str = ""


def _plan_current(family: _Family, choice: Choice, taken: set[str], ctx: _Context) -> _Family:
    """Create the family's current generation, or update it in place.

    A create waits for its runner template, so its first runner is set up as the spec says.
    """
    spec, key = family.spec, spec_key(family.spec)
    current = current_generation(spec.name, family.members, key, ctx.settings.name_budget)
    if current is None:
        name = _plan_create(spec, key, choice.template_id, taken, ctx) if choice.ready else ""
        return replace(family, name=name)
    # Registered late on GitHub: noted, and not live before its listener (``registration``).
    noted = registration.note(current, spec.name, ctx.now) if current.enabled else None
    if noted is not None and _plan_write(noted, f"note on scaleset {noted.name}", ctx):
        return replace(family, scaleset=current, name=current.name)
    _plan_update(spec, current, _template_change(current, choice, ctx), ctx)
    live = _is_live(current, spec, ctx)
    _plan_refresh(family, current, live, ctx)
    return replace(family, scaleset=current, live=live, name=current.name)


def _plan_refresh(family: _Family, current: ScaleSet, live: bool, ctx: _Context) -> None:
    """Refresh the idle runners of a live generation serving alone, in a settled family."""
    spec, alone = family.spec, all(m.scaleset is current for m in family.members)
    settled = not family.contested and spec.name.lower() not in ctx.unsettled
    if not (ctx.settings.refresh_idle_runners and live and alone and settled):
        return
    step = refresh(spec, current, ctx.instances[current.id], ctx.observed.templates, ctx.wake)
    if step is None:
        return
    progress = step.progress
    if step.waiting and _waits(wait_key(progress), REFRESH_STUCK, ctx):
        blocked = stuck(current, spec.min_idle_runners)
        progress = Progress(spec.name, current.name, progress.phase, progress.runners, blocked)
    ctx.progress.append(progress)
    if step.removal is not None:
        runner = step.removal.instance_name
        _plan_write(step.removal, f"refresh runner {runner} of {progress.names}", ctx)


def _plan_predecessors(family: _Family, cover: Cover, ctx: _Context) -> None:
    """Retire, drain and delete a family's predecessors once its current one serves.

    In a contested family (a duplicate name) another unit's generation may be among the
    members, so nothing serving is retired until the operator settles the duplicate.
    """
    serving, logical = family.scaleset, family.spec.name
    predecessors = [m.scaleset for m in family.members if m.scaleset is not serving]
    may_retire = family.live and not family.contested
    hold = logical.lower() in ctx.unsettled
    phases = [
        _plan_retirement(p, logical, may_retire and cover.covers(p), hold, ctx)
        for p in predecessors
    ]
    ctx.phases.update((p.id, at) for p, at in zip(predecessors, phases, strict=True))
    runners = sum(len(ctx.instances[p.id]) for p in predecessors)
    phase = family_phase(serving, bool(predecessors), phases)
    causes = [ctx.blocked[p.id] for p in predecessors if p.id in ctx.blocked]
    if serving is None and not family.name:
        # Nothing is created while no create can be planned (held back, or skipped): the
        # status tells why, and never says "creating" of what is not being created; a
        # generation being replaced that is stuck is told all the same.
        phase = least_advanced(phases) if causes else None
    if phase is not None and not family.contested:
        # The GARM name the phase is about: what is created, else what is replaced.
        about = [p.name for p, at in zip(predecessors, phases, strict=True) if at is phase]
        replaced = about or [p.name for p in predecessors]
        name = family.name if phase is Phase.CREATING else replaced[0]
        blocked = causes[0] if causes else ""
        ctx.progress.append(Progress(logical, name, phase, runners, blocked))


def _plan_create(
    spec: ScalesetSpec, key: GenerationKey, template_id: int, taken: set[str], ctx: _Context
) -> str:
    """Create the generation under the first candidate name not ``taken``; its name, or "".

    ``taken`` holds GitHub's names too: a name left on GitHub moves on to the next
    candidate. A create refused earlier for the same request waits out its back-off.
    """
    observed = ctx.observed
    candidates = (generation_name(key, i, ctx.settings.name_budget) for i in range(MAX_CANDIDATES))
    name = next((c for c in candidates if c.lower() not in taken), None)
    if name is None:
        reason = "every candidate scaleset name is taken in GARM or on GitHub"
        ctx.skipped.append(Skipped(spec.source, spec.name, reason, blocking=True))
        # A name GitHub was found to hold is tried again once that is forgotten.
        remembered = observed.refusals.taken.values()
        if remembered:
            ctx.wake.due(min(remembered))
        return ""
    entity = next(
        e
        for e in observed.entities
        if e.kind == spec.entity_kind and e.name.lower() == spec.entity_name.lower()
    )
    create = CreateScaleset(spec.name, entity, create_body(spec, name, key, template_id))
    ((write, asked),) = create.asks()
    refusal = observed.refusals.holding(write, asked, ctx.now)
    if refusal is not None:
        # Waiting out its back-off: the operator hears of it once it needs them.
        reason = f"its create was refused ({refusal.times}): {refusal.cause}"
        ctx.skipped.append(Skipped(spec.source, spec.name, reason, blocking=refusal.blocked))
        ctx.wake.due(refusal.retry_at)
        return ""
    taken.add(name.lower())
    ctx.actions.append(create)
    return name


def create_body(
    spec: ScalesetSpec, name: str, key: GenerationKey, template_id: int = 0
) -> dict[str, Any]:
    """The create request: every field of the spec, enabled, labels including the name.

    GARM creates scale sets disabled unless told otherwise (docs/reference/garm-api.md
    §2.3), and the runner group key is hyphenated on create only. Zero values are left
    out, as Go would: without a template id GARM picks its system template.
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
    if template_id:
        body["template_id"] = template_id
    return body


def _template_change(current: ScaleSet, choice: Choice, ctx: _Context) -> dict[str, Any]:
    """Point the current generation at its template, or back at GARM's default.

    Only the charm's own templates are swapped out: one the operator set by hand on a
    scaleset needing none is left in place.
    """
    templates = ctx.templates
    if not choice.ready or choice.keep:
        return {}
    if choice.template_id:
        wanted = choice.template_id
    elif current.template_id in templates.ours and templates.base is not None:
        wanted = templates.base.id
    else:
        return {}
    return {"template_id": wanted} if current.template_id != wanted else {}


def _plan_update(
    spec: ScalesetSpec, current: ScaleSet, template: dict[str, Any], ctx: _Context
) -> None:
    """Bring the current generation in line: enabled first, then every field GARM takes.

    Enabling again (a flip-flop: its labels asked for again while it drained) is a write
    of its own, with the spec's counts, so no field GARM refuses keeps those labels
    unserved; the other fields follow on the next plan. A field GARM refused waits out
    its back-off alone.
    """
    notes = Notes.read(current.extended_state)
    shown = shown_name(spec.name, current.name)
    if not current.enabled:
        counts = {"max_runners": spec.max_runners, "min_idle_runners": spec.min_idle_runners}
        changes: dict[str, Any] = {
            "enabled": True,
            **{k: v for k, v in counts.items() if getattr(current, k) != v},
            "extended_state": notes.enabled(ctx.now).text(),
        }
        action = UpdateScaleset(current.id, current.name, changes, "re-enable", spec.name)
        _plan_write(action, f"re-enable scaleset {shown}", ctx)
        return
    wanted = _field_changes(spec, current, notes) | template
    fields = {
        name: value
        for name, value in wanted.items()
        if not _held(
            UpdateScaleset(current.id, current.name, {name: value}, "update", spec.name),
            f"update {name} of scaleset {shown}",
            ctx,
        )
    }
    if not fields:
        return
    # The digest of extra_specs is noted with the extra_specs it describes, never ahead.
    behind = "extra_specs" in wanted and "extra_specs" not in fields
    # Found enabled with retirement notes (enabled again by hand): stamped enabled now.
    base = notes.enabled(ctx.now) if notes.retired_at is not None else notes
    noted = replace(base, specs=notes.specs if behind else specs_digest(spec.extra_specs))
    noted = stamped(noted, fields, ctx.now)
    if noted.text() != current.extended_state:
        fields["extended_state"] = noted.text()
    ctx.actions.append(UpdateScaleset(current.id, current.name, fields, "update", spec.name))


def _plan_write(action: Action, write: str, ctx: _Context) -> bool:
    """Plan a write unless the memory of refusals holds it back; whether it was planned."""
    if _held(action, write, ctx):
        return False
    ctx.actions.append(action)
    return True


def _held(action: Action, write: str, ctx: _Context) -> bool:
    """Whether the memory of refusals holds ``action`` back now; if so it is told as ``write``."""
    for key, asked in action.asks():
        refusal = ctx.observed.refusals.holding(key, asked, ctx.now)
        if refusal is not None:
            ctx.held.append(Held(write, refusal))
            ctx.wake.due(refusal.retry_at)
            return True
    return False


def _field_changes(spec: ScalesetSpec, current: ScaleSet, notes: Notes) -> dict[str, Any]:
    """The fields of an enabled current generation that really differ from the spec.

    Values are compared, never key presence: GARM leaves ``min_idle_runners: 0`` off the
    wire, and ``from_json`` has already read it as zero. The runner group is
    ``runner_group`` on update (the hyphenated key is ignored there).

    ``extra_specs`` absent from GARM's list is unknown, not empty: GARM means to leave
    it out of lists and only a gorm quirk puts it in (docs/reference/garm-api.md §2.5).
    The digest of what the charm last set, kept in the notes, stands in for it then, so a
    GARM that fixes the quirk costs no PUT per pass (and no outdated runners).
    """
    fields = ("image", "flavor", "os_arch", "max_runners", "min_idle_runners")
    changes = {k: getattr(spec, k) for k in fields if getattr(current, k) != getattr(spec, k)}
    if (current.runner_group or "Default") != (spec.runner_group or "Default"):
        changes["runner_group"] = spec.runner_group or "Default"
    if current.extra_specs is None:
        differs = notes.specs != specs_digest(spec.extra_specs)
    else:
        differs = (spec.extra_specs or {}) != current.extra_specs
    if differs:
        changes["extra_specs"] = spec.extra_specs or {}
    return changes


def _is_live(current: ScaleSet, spec: ScalesetSpec, ctx: _Context) -> bool:
    """Whether the current generation can take over from its predecessors.

    Registered on GitHub, enabled, and listening (until its listener opens, nothing takes
    its labels' jobs). With warm capacity asked for, it must also hold an idle runner,
    unless the hand-over timeout has passed since it was created or last enabled (a
    quota too small for both generations must not stall the changeover). What it waits
    for is due when the listener opens, when the timeout ends, and soon while a runner
    boots (``Plan.wake``).
    """
    if not current.scale_set_id or not current.enabled:
        return False
    now, instances = ctx.now, ctx.instances[current.id]
    # Created or, later, enabled again: its listener's start.
    enabled_at = Notes.read(current.extended_state).believed(now).enabled_at
    since = max(current.created_at, enabled_at or current.created_at)
    if now - since < LISTENER_STARTUP:
        ctx.wake.due(since + LISTENER_STARTUP, live=True)
        return False
    if spec.min_idle_runners == 0 or any(i.is_idle for i in instances):
        return True
    if now - since >= ctx.settings.handover_timeout:
        return True
    ctx.wake.due(since + ctx.settings.handover_timeout, live=True)
    # GARM makes the runner, then it boots and reports idle: awaited since the newest
    # of those that are on their way, or since the listener opened when none is yet.
    booting = [
        i.created_at
        for i in instances
        if i.runner_status in ("pending", "installing")
        and i.status in ("pending_create", "creating", "running")
    ]
    ctx.wake.expected(max(booting) if booting else since + LISTENER_STARTUP, live=True)
    return False


def _plan_retirement(
    scaleset: ScaleSet, logical: str | None, may_retire: bool, hold: bool, ctx: _Context
) -> Phase:
    """Retire, drain and delete one scaleset of ``logical`` that is no longer wanted.

    Disabling alone does not drain in GARM (its scale-down target is
    ``min(min_idle + desired, max)``), so retirement also zeroes both counts. A scaleset
    found disabled without a readable stamp is stamped now; so is one found enabled.
    ``hold`` (a partially seen family) writes nothing: the phase is only reported.
    """
    now = ctx.now
    # Where it stands when nothing is written: serving, else draining or empty.
    if scaleset.enabled:
        standing = Phase.HANDING_OVER
    else:
        standing = Phase.DRAINING if ctx.instances[scaleset.id] else Phase.AWAITING_DELETION
    if hold or (scaleset.enabled and not may_retire):
        return standing
    notes = Notes.read(scaleset.extended_state).believed(now)
    changes: dict[str, Any] = {}
    if scaleset.enabled:
        changes["enabled"] = False
    if scaleset.min_idle_runners:
        changes["min_idle_runners"] = 0
    if scaleset.max_runners:
        changes["max_runners"] = 0
    if notes.retired_at is None or scaleset.enabled:
        # Found enabled again (by hand, say), it may have taken new jobs: a fresh stamp.
        changes["extended_state"] = notes.retired(now).text()
    if changes:  # A missing stamp is among them.
        action = UpdateScaleset(scaleset.id, scaleset.name, changes, "retire", logical)
        if _plan_write(action, f"retire scaleset {shown_name(logical, scaleset.name)}", ctx):
            return Phase.RETIRING
        return standing  # Held back: nothing is retired; the status tells the held write.
    return _plan_drain(scaleset, logical, notes, ctx)


def _plan_drain(scaleset: ScaleSet, logical: str | None, notes: Notes, ctx: _Context) -> Phase:
    """Delete a retired scaleset once empty; remove the runners that hold it for nothing.

    GARM refuses to delete a scaleset while any instance row exists, so a stuck runner
    must be removed. Failed runners never take a job: they go at once; past the deadline
    every removable runner goes. A refusal that keeps coming, or a runner GARM will not
    remove, is put to the operator (ADR 0003).
    """
    now, instances = ctx.now, ctx.instances[scaleset.id]
    deadline, retired_at = ctx.settings.drain_deadline, notes.retired_at
    # Subtracted, not added: a stamp at the calendar's edge must not overflow.
    past_deadline = bool(deadline) and retired_at is not None and now - retired_at >= deadline
    shown = shown_name(logical, scaleset.name)
    noted = _noted(scaleset, notes, instances, past_deadline, ctx)
    if noted != notes:
        changes = {"extended_state": noted.text()}
        note = UpdateScaleset(scaleset.id, scaleset.name, changes, "note", logical)
        if _plan_write(note, f"note on scaleset {shown}", ctx):
            notes = noted
    if not instances:
        return _plan_delete(scaleset, logical, ctx)

    def waited(instance: Instance) -> timedelta:
        """How long this charm has seen the runner in its status (0 if not noted yet)."""
        if instance.status == FORCE_REMOVED:
            # Stamped when GARM took the charm's own force-removal, which it does not retry.
            return now - instance.updated_at
        since = notes.since(instance.name, instance.status)
        return now - since if since is not None else timedelta(0)

    _drain_due(instances, retired_at, past_deadline, waited, ctx)
    # A force GARM took is waited on until the runner goes; overdue, it is sent no more.
    undone = [
        i
        for i in instances
        if (i.status == FORCE_REMOVED or force_key(scaleset, i) in ctx.observed.refusals.waits)
        and _waits(force_key(scaleset, i), FORCE_STUCK, ctx)
    ]
    # Before a force may be sent, a runner GARM keeps failing to delete is a wait too.
    lingering = [
        i
        for i in instances
        if not past_deadline
        and i.status == "pending_delete"
        and _waits(delete_key(scaleset, i), STUCK_RUNNER, ctx)
    ]
    removing = [
        i
        for i in instances
        if _removable(i, waited(i)) and (past_deadline or failed(i)) and i not in undone
    ]
    sending, refused = _plan_removals(scaleset, logical, removing, ctx)
    stuck = [
        i
        for i in instances
        if past_deadline and i.status not in _REMOVABLE_STATUSES and waited(i) >= STUCK_RUNNER
    ]
    if refused is not None:
        runner, refusal = refused
        why = (
            "past the drain deadline (a job still running?): end the job, or raise "
            "drain-deadline-minutes"
            if past_deadline
            else "that failed: see /var/log/garm/garm.log"
        )
        ctx.blocked[scaleset.id] = (
            f"GARM refused {refusal.times} to remove runner {runner} of {scaleset.name} {why}"
        )
    elif stuck:
        ctx.blocked[scaleset.id] = (
            f"GARM will not remove runner {stuck[0].name} ({stuck[0].status}) of "
            f"{scaleset.name}: check its provider (/var/log/garm/garm.log)"
        )
    elif undone:
        ctx.blocked[scaleset.id] = (
            f"GARM has not carried out the force-removal of runner {undone[0].name} of "
            f"{scaleset.name} in 15 minutes: its provider cannot delete the VM and GARM's "
            "own retries undo the force; fix the provider, or delete the VM (GARM then "
            "removes the runner)"
        )
    elif lingering:
        ctx.blocked[scaleset.id] = (
            f"GARM has not deleted runner {lingering[0].name} of {scaleset.name} in 30 "
            "minutes: its provider cannot delete the VM (/var/log/garm/garm.log); it is "
            "force-removed only past drain-deadline-minutes"
        )
    # Said only of what is being done: force-removals to send, or sent and under way; a
    # runner waiting out its grace, or one GARM will not remove, is still draining.
    forcing = sending or any(i.status == FORCE_REMOVED for i in instances)
    return Phase.FORCE_REMOVING if forcing else Phase.DRAINING


def _drain_due(
    instances: list[Instance],
    retired_at: datetime | None,
    past_deadline: bool,
    waited: Callable[[Instance], timedelta],
    ctx: _Context,
) -> None:
    """When the drain of a retired scaleset can next move on (``Plan.wake``).

    A busy runner goes when its job ends, which only GitHub knows: only the deadline, the
    end of a grace in ``pending_delete`` and the moment a runner counts as stuck are due.
    """
    deadline = ctx.settings.drain_deadline
    if deadline and retired_at is not None and not past_deadline:
        ctx.wake.due(retired_at + deadline)
    for instance in instances:
        if instance.status == "pending_delete" and waited(instance) < PENDING_DELETE_GRACE:
            ctx.wake.due(ctx.now - waited(instance) + PENDING_DELETE_GRACE)
        elif (
            past_deadline
            and instance.status not in _REMOVABLE_STATUSES
            and waited(instance) < STUCK_RUNNER
        ):
            # Named to the operator once it has sat there long (``STUCK_RUNNER``).
            ctx.wake.due(ctx.now - waited(instance) + STUCK_RUNNER)
    # GARM scales down what is up and not busy, and reaps what it is deleting, within
    # its grace; a runner it will not remove, or whose delete keeps failing past the
    # grace, is not expected (the periodic timer looks at it).
    going = [
        i
        for i in instances
        if (i.status == "running" and i.runner_status != "active" and not failed(i))
        or i.status == "deleting"
        or (i.status == "pending_delete" and waited(i) < PENDING_DELETE_GRACE)
    ]
    if going and retired_at is not None:
        ctx.wake.expected(retired_at)


def _plan_removals(
    scaleset: ScaleSet, logical: str | None, removing: list[Instance], ctx: _Context
) -> tuple[bool, tuple[str, Refusal] | None]:
    """Force-remove ``removing``; whether any is sent, and the first refused for good.

    Each runner's removal waits out its own back-off: one whose job still runs holds back
    no other (a failed runner of the same scaleset goes at once).
    """
    shown, refusals = shown_name(logical, scaleset.name), ctx.observed.refusals.refusals
    sending, refused = False, None
    for instance in removing:
        removal = RemoveInstance(instance.name, scaleset.id, scaleset.name, logical)
        if _plan_write(removal, f"force-remove runner {instance.name} of {shown}", ctx):
            sending = True
        ((key, _),) = removal.asks()
        if refused is None and (refusal := refusals.get(key)) is not None and refusal.blocked:
            refused = (instance.name, refusal)
    return sending, refused


def _plan_delete(scaleset: ScaleSet, logical: str | None, ctx: _Context) -> Phase:
    """Delete a retired scaleset with no runner left, unless a kept delete backs off.

    GARM answers a delete GitHub refused with 200 and keeps the scaleset
    (docs/reference/garm-api.md §2.6): the reconciler notes that as a refusal.
    """
    delete = DeleteScaleset(scaleset.id, scaleset.name, logical)
    ((key, _),) = delete.asks()
    kept = ctx.observed.refusals.refusals.get(key)
    if kept is not None and kept.cause == KEPT_CAUSE and kept.blocked:
        ctx.blocked[scaleset.id] = (
            f"GARM kept scaleset {scaleset.name} after {kept.refusals} deletes: GitHub "
            "refused (GARM logs no reason); check the GitHub App's permissions, or "
            "delete it on GitHub"
        )
    if ctx.now - scaleset.created_at >= YOUNGEST_DELETE:
        _plan_write(delete, f"delete scaleset {shown_name(logical, scaleset.name)}", ctx)
    else:
        ctx.wake.due(scaleset.created_at + YOUNGEST_DELETE)
    return Phase.AWAITING_DELETION


def _noted(
    scaleset: ScaleSet, notes: Notes, instances: list[Instance], past_deadline: bool, ctx: _Context
) -> Notes:
    """The notes with the runners the drain times newly noted as first seen now.

    The drain times a runner in ``pending_delete``, and past the deadline one GARM will
    not remove, from when it was first seen so: GARM re-stamps ``updated_at`` on every
    retry of a failing delete (a force-removal GARM took is not retried: its stamp
    stands). A gone runner's note is dropped only with another change: no write of its own.
    """
    waited_on = [
        (i.name, i.status)
        for i in instances
        if i.status == "pending_delete"
        or (past_deadline and i.status not in _REMOVABLE_STATUSES and i.status != FORCE_REMOVED)
    ]
    seeing = notes.seeing(waited_on, ctx.now)
    new = {(s.runner, s.status) for s in seeing.seen} - {(s.runner, s.status) for s in notes.seen}
    unchanged = notes == Notes.read(scaleset.extended_state)
    return seeing if new or not unchanged else notes


def _removable(instance: Instance, waited: timedelta) -> bool:
    """Whether GARM accepts a force-removal of this runner, and one is worth sending."""
    if instance.status == "pending_delete":
        return waited >= PENDING_DELETE_GRACE
    return instance.status in _REMOVABLE_STATUSES
