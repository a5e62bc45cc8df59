"""What the operator asked for: desired scaleset specs and the reconciler's settings.

These are the planner's inputs. Parsing relation data into them (and refusing bad data)
happens before; by the time a spec is built here its values are already validated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

SpecEntityKind = Literal["organization", "repository"]


def application_of(unit: str) -> str:
    """The application a unit name belongs to (``garm-configurator/3`` → its app)."""
    return unit.rpartition("/")[0] or unit


def unit_order(unit: str) -> tuple[str, int]:
    """Unit names like ``app/3`` in application, then numeric unit, order."""
    app, _, number = unit.rpartition("/")
    # isdigit() alone also accepts digits int() refuses, such as "²".
    return (app, int(number)) if number.isascii() and number.isdigit() else (unit, -1)


@dataclass(frozen=True)
class ScalesetSpec:
    """One logical scaleset as a garm-configurator unit publishes it.

    ``name`` is the *logical* name the operator configured; the live GARM scaleset gets a
    generation name derived from it (see ``naming``). ``source`` names where the spec came
    from (a configurator unit) so problems can be reported against it and duplicates
    resolved in a stable order.
    ``template_blocks`` is what the charm adds to GARM's install template for this
    scaleset's runners (``runners.scripts``); empty when they need nothing added. Neither
    it nor ``extra_specs`` is part of a generation: both change in place.
    """

    source: str
    name: str
    entity_kind: SpecEntityKind
    entity_name: str
    provider_name: str
    image: str
    flavor: str
    os_arch: str
    max_runners: int
    min_idle_runners: int = 0
    labels: tuple[str, ...] = ()
    runner_group: str = "Default"
    os_type: str = "linux"
    extra_specs: dict[str, Any] = field(default_factory=dict)
    template_blocks: str = ""


@dataclass(frozen=True)
class HeldSpec:
    """A unit whose data cannot be used right now: invalid, or still being published.

    Its live scalesets are left exactly as they are: the unit is still related, so its
    scaleset is not an orphan. ``blocking`` says the operator must act (invalid data), as
    opposed to waiting for the configurator to finish publishing.
    """

    source: str
    name: str
    reason: str
    blocking: bool = True


@dataclass(frozen=True)
class Desired:
    """Everything the relation currently asks for.

    ``complete`` is False when this unit's view of Juju may be missing related units
    (units Juju lists that have not joined here yet, a suspended relation): what such a
    view does not show is not evidence that the operator wants it gone, so no scaleset
    that no visible unit publishes is retired. ``unsettled`` holds the (lower-cased)
    names that units of such a partially seen application publish: their scalesets are
    not retired, drained away or deleted either (ADR 0002). ``template_hold`` says why
    no runner template may be written now (debug-ssh data that cannot be used).
    """

    specs: tuple[ScalesetSpec, ...] = ()
    held: tuple[HeldSpec, ...] = ()
    complete: bool = True
    unsettled: frozenset[str] = frozenset()
    template_hold: str = ""


@dataclass(frozen=True)
class Settings:
    """Operator-tunable limits of a changeover.

    ``name_budget`` exists because the OpenStack provider tags each VM with
    ``garm-pool-id=<scaleset name>-<entity UUID>`` and Nova tags are at most 60 bytes.
    ``drain_deadline`` of zero means a retired scaleset's runners are never force-removed.
    ``refresh_idle_runners``: idle runners made before a change that new runners get (an
    image, a flavor, a runner option) are replaced one at a time (docs/adr/0010).
    """

    name_budget: int = 10
    handover_timeout: timedelta = timedelta(minutes=30)
    drain_deadline: timedelta = timedelta(hours=7)
    refresh_idle_runners: bool = True
