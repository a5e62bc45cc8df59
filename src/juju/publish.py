"""What the leader tells each garm-configurator application about its units' scalesets.

Pure: from a pass's relation state, outcome and current generations to garm's
application databag on each relation (format: ``GarmAppData`` in
``charms.garm_machine.v0.garm_configurator``). A unit's phase, most specific first:
its own data refused, ``held``; its scaleset left out of the pass, ``held`` if only
the operator can fix it, else ``waiting``; a changeover under way, ``creating`` or
``replacing``; a current generation, ``serving`` (refreshing idle runners included:
docs/adr/0010); else ``creating``. Held and waiting entries name no GARM scaleset:
the live one is not the pass's doing. Units with no scaleset published are not listed.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from charms.garm_machine.v0.garm_configurator import (
    CREATING,
    HELD,
    REPLACING,
    SERVING,
    WAITING,
    GarmAppData,
    ScalesetState,
)

from juju.relation import RelationState
from scalesets.actions import Phase, Progress, Skipped
from scalesets.reconciler import Outcome
from scalesets.spec import application_of, unit_order

# Lower-cased logical name -> GARM name of its current generation, live or not.
Current = Mapping[str, str]
# garm-configurator relation id -> the remote application's name, as ``relation.app.name``.
Relations = Mapping[int, str]


def published(
    state: RelationState, outcome: Outcome, current: Current, relations: Relations
) -> dict[int, dict[str, str]] | None:
    """The keys of garm's application databag per relation, listing that application's units.

    None, leaving what was published, when the pass did not read GARM or did not see
    every related unit (ADR 0002): a guess would replace it.
    """
    read = outcome.unreachable is None and all(e.action is not None for e in outcome.errors)
    if not read or not state.desired.complete:
        return None
    states = unit_states(state, outcome, current)
    return {
        relation_id: GarmAppData(
            scalesets={u: s for u, s in states.items() if application_of(u) == app}
        ).to_databag()
        for relation_id, app in relations.items()
    }


def unit_states(
    state: RelationState, outcome: Outcome, current: Current
) -> dict[str, ScalesetState]:
    """Every configurator unit that published a scaleset, and what became of it."""
    refused = {h.source: h for h in state.desired.held if h.blocking}
    own = {(h.source, h.name, h.reason) for h in refused.values()}
    left_out: dict[tuple[str, str], Skipped] = {}
    for skipped in outcome.skipped:
        if (skipped.source, skipped.name, skipped.reason) in own:
            continue
        key = (application_of(skipped.source), skipped.name.lower())
        if key not in left_out or (skipped.blocking and not left_out[key].blocking):
            left_out[key] = skipped
    progress = {
        p.logical_name.lower(): p for p in outcome.progress if p.logical_name and not p.orphan
    }
    names = {unit: data.name for unit, data in state.units}
    result: dict[str, ScalesetState] = {}
    for unit in sorted(names.keys() | refused.keys(), key=unit_order):
        if unit in refused:
            held = refused[unit]
            result[unit] = ScalesetState(HELD, held.name or None, message=held.reason)
            continue
        name = names[unit]
        skipped = left_out.get((application_of(unit), name.lower()))
        if skipped is not None:
            phase = HELD if skipped.blocking else WAITING
            result[unit] = ScalesetState(phase, name, message=skipped.reason)
        elif name.lower() in progress:
            result[unit] = _changing(name, progress[name.lower()], current.get(name.lower()))
        elif name.lower() in current:
            result[unit] = ScalesetState(SERVING, name, current[name.lower()])
        else:
            result[unit] = ScalesetState(CREATING, name)
    return result


def _changing(name: str, progress: Progress, current: str | None) -> ScalesetState:
    """A changeover under way: ``Progress.scaleset`` is the generation made or replaced."""
    message = f"stuck: {progress.blocked}" if progress.blocked else None
    if progress.phase is Phase.REFRESHING:
        return ScalesetState(SERVING, name, progress.scaleset, message=progress.describe())
    if progress.phase is Phase.CREATING:
        return ScalesetState(CREATING, name, progress.scaleset or current, message=message)
    return ScalesetState(
        REPLACING,
        name,
        current,
        progress.runners,
        message or progress.describe(),
        replaced=progress.scaleset or None,
    )


def write(databag: MutableMapping[str, str], wanted: Mapping[str, str]) -> bool:
    """Set the keys of ``wanted`` that differ; whether any did (each wakes every unit)."""
    changed = False
    for key, value in wanted.items():
        if databag.get(key) != value:
            databag[key] = value
            changed = True
    return changed
