"""The planner's inputs: desired scaleset specs, already checked, and the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal


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
    """One logical scaleset as a garm-configurator unit (``source``) publishes it.

    ``name`` is the logical name; GARM's gets a generation name (``naming``).
    ``template_blocks`` is what the charm adds to the install template (``runners.scripts``).
    """

    source: str
    name: str
    entity_kind: Literal["organization", "repository"]
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
    """A unit whose data cannot be used now; its live scalesets are left as they are.

    ``blocking``: the operator must act, rather than wait for the configurator.
    """

    source: str
    name: str
    reason: str
    blocking: bool = True


@dataclass(frozen=True)
class Desired:
    """Everything the relation currently asks for.

    ``complete`` False: this view may miss related units, so nothing unseen is retired;
    ``unsettled``: names a partly seen application publishes, kept too (ADR 0002).
    ``template_hold``: why no runner template may be written now (bad debug-ssh data).
    """

    specs: tuple[ScalesetSpec, ...] = ()
    held: tuple[HeldSpec, ...] = ()
    complete: bool = True
    unsettled: frozenset[str] = frozenset()
    template_hold: str = ""


@dataclass(frozen=True)
class Settings:
    """Operator-tunable limits of a changeover.

    ``name_budget``: the OpenStack provider tags each VM ``garm-pool-id=<name>-<entity
    UUID>``, and Nova tags are at most 60 bytes. ``drain_deadline`` 0: never force-remove.
    """

    name_budget: int = 10
    handover_timeout: timedelta = timedelta(minutes=30)
    drain_deadline: timedelta = timedelta(hours=7)
    refresh_idle_runners: bool = True
