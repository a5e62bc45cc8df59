"""Which configurator relation each provider comes from, and what a reused name holds back.

A provider is named after its unit (``relation.own_provider``), so an application
deployed again under its old name publishes its old providers' names. While the earlier
relation's scalesets use one, GARM keeps their settings (``garm.providers``) and nothing
of the new relation may run on it. Relation ids, never reused, tell the two apart. Pure.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from garm.config import OpenstackProvider
from garm.providers import KeptProviders, Recorded
from juju.records import Configurators
from juju.relation import RelationState, own_provider
from scalesets.actions import Skipped
from scalesets.spec import HeldSpec, application_of

logger = logging.getLogger(__name__)


def published(providers: Iterable[OpenstackProvider], seen: Configurators) -> tuple[Recorded, ...]:
    """The related units' providers, each with the id of the relation its unit is on."""
    ids, units = _relation_ids(seen), _units_by_provider(seen)
    return tuple(
        Recorded(p, ids.get(application_of(units[p.name])) if p.name in units else None)
        for p in providers
    )


def left_out(
    state: RelationState, kept: KeptProviders | None, seen: Configurators
) -> tuple[RelationState, tuple[Skipped, ...]]:
    """The relation state without what would run on another relation's provider, and why.

    An application whose provider is held is left out whole, told as skipped; any other
    spec on a provider kept for another relation is left out alone. Left out, not held: a
    held spec keeps its name's live scalesets, which may be the earlier relation's, which
    must drain to free the name. Held when GARM could not say (``unsure``).
    """
    if kept is None:
        return state, ()
    ids = _relation_ids(seen)
    units = _units_by_provider(seen)
    names = {unit: data.name for unit, data in state.units}
    waiting: dict[str, Skipped] = {}
    for held in kept.held:
        name = held.provider.name
        unit = units.get(name, "")
        other = kept.kept_for_another(name, held.relation)
        reason = (
            f"provider {name!r} keeps the settings of an earlier relation (id {other}) "
            "while its scalesets drain"
        )
        logger.warning("%s: %s", unit, reason)
        waiting.setdefault(application_of(unit), Skipped(unit, names.get(unit, ""), reason))
    desired, specs, holding = state.desired, [], []
    for spec in desired.specs:
        app = application_of(spec.source)
        if app in waiting:
            if kept.unsure:  # held where it stands: the next pass knows
                reason = f"{waiting[app].reason}, if any still uses it"
                holding.append(HeldSpec(spec.source, spec.name, reason, False))
        elif kept.kept_for_another(spec.provider_name, ids.get(app)) is not None:
            logger.info(
                "%s: left out: provider %s is another relation's", spec.source, spec.provider_name
            )
        else:
            specs.append(spec)
    if kept.unsure:  # nothing of these applications is told as left out
        waiting = {}
    told = [
        Skipped(h.source, h.name, h.reason, h.blocking)
        for h in desired.held
        if application_of(h.source) in waiting
    ]
    staying = [h for h in desired.held if application_of(h.source) not in waiting]
    desired = dataclasses.replace(desired, specs=tuple(specs), held=(*staying, *holding))
    return dataclasses.replace(state, desired=desired), (*waiting.values(), *told)


def _relation_ids(seen: Configurators) -> dict[str, int]:
    """Each related application's relation id (one relation per application)."""
    return {app: relation for relation, app in seen.apps.items()}


def _units_by_provider(seen: Configurators) -> dict[str, str]:
    """Each visible configurator unit by the name of its own provider."""
    return {own_provider(unit): unit for unit, _ in seen.units}
