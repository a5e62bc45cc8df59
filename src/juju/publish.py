"""What the leader tells each garm-configurator application about its units' scalesets.

Pure: from what a pass already knows (the relation state it acted on, its outcome, and
the GARM name of each logical scaleset's current generation) to the keys of garm's
application databag on each garm-configurator relation. The format, and why it is so:
the module docs of ``charms.garm_machine.v0.garm_configurator`` (``GarmAppData``).

A unit's phase, from the most specific fact about it:

1. its own data was refused (invalid, runner options refused): ``held``, with why;
2. its scaleset was left out of the pass, for every unit of its application publishing
   that name (a duplicate, a provider or org not registered, an image not published, a
   create GitHub refused): ``held`` when only an operator can fix it, else ``waiting``;
3. a changeover of its logical scaleset is under way (``Progress``, orphans aside):
   ``creating`` while no older generation exists, else ``replacing``, naming the older
   generation and the runners the older ones hold;
4. its logical scaleset has a current generation and nothing else: ``serving``, with
   the message ``refreshing N idle runners`` while its idle runners made before a change
   are replaced (no changeover: docs/adr/0010);
5. otherwise nothing of it is live yet: ``creating``.

Units that published no scaleset yet are not listed: GARM holds nothing of theirs. Held
and waiting entries never name a scaleset: the live one (if any) is not the pass's
doing, and with a duplicate name it is another application's.
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

# Lower-cased logical scaleset name -> GARM name of its current generation (the one that
# serves, or is to serve, the spec: ``scalesets.planner._Current.name``), for every family the
# pass's last plan walked that has one, live or not, contested or not.
Current = Mapping[str, str]
# garm-configurator relation id -> the remote application's name, as ``relation.app.name``.
Relations = Mapping[int, str]


def published(
    state: RelationState, outcome: Outcome, current: Current, relations: Relations
) -> dict[int, dict[str, str]] | None:
    """The keys to set in garm's application databag, per garm-configurator relation.

    Each relation's databag lists only the units of that relation's application. None
    when the pass did not read GARM (unreachable, or its list calls refused), or did not
    see every related unit: what was published before is then left as it is rather than
    replaced by a guess.
    """
    if outcome.unreachable is not None or any(e.action is None for e in outcome.errors):
        return None
    # A partial view (units not joined here yet, a relation being suspended) would list
    # fewer units than there are: what was published before stands (ADR 0002).
    if not state.desired.complete:
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
    """A logical scaleset whose changeover is under way.

    ``Progress.scaleset`` is the generation being created, or else the one being
    replaced; ``current`` is the one that serves or is to serve.
    """
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
    """Set the keys of ``wanted`` that differ in ``databag``; whether any did.

    Only a real change is written, so a pass that changes nothing wakes no configurator
    unit (each write is a relation-changed hook on every one of them).
    """
    changed = False
    for key, value in wanted.items():
        if databag.get(key) != value:
            databag[key] = value
            changed = True
    return changed
