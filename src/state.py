"""Typed charm state: desired scaleset specs from relation data, settings from config.

Pure: the charm hands in plain databags and config values; nothing here talks to Juju.
One unit's bad data is recorded against that unit and never stops the others.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from charms.garm.v0.garm_configurator import ConfiguratorUnitData, DatabagError

from naming import MIN_NAME_BUDGET
from spec import Desired, HeldSpec, ScalesetSpec, Settings

logger = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A charm config option the operator must correct; the message names it."""


@dataclass(frozen=True)
class RelationState:
    """What the garm-configurator relations ask for.

    ``silent`` lists units related but with no scaleset published yet: nothing of theirs
    can exist in GARM, so they hold nothing back, but the operator may want to know.
    """

    related: bool
    desired: Desired
    silent: tuple[str, ...] = ()


def settings_from_config(config: Mapping[str, object]) -> Settings:
    """Read the changeover settings, refusing values that cannot work."""
    budget = _int_option(config, "scaleset-name-budget", 10)
    if budget < MIN_NAME_BUDGET:
        raise ConfigError(f"scaleset-name-budget must be at least {MIN_NAME_BUDGET}")
    drain = _int_option(config, "drain-deadline-minutes", 420)
    handover = _int_option(config, "handover-timeout-minutes", 30)
    for option, value in (
        ("drain-deadline-minutes", drain),
        ("handover-timeout-minutes", handover),
    ):
        if value < 0:
            raise ConfigError(f"{option} must not be negative")
    return Settings(
        name_budget=budget,
        handover_timeout=timedelta(minutes=handover),
        drain_deadline=timedelta(minutes=drain),
    )


def _int_option(config: Mapping[str, object], name: str, default: int) -> int:
    value = config.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be a whole number")
    return value


def relation_state(related: bool, units: Iterable[tuple[str, Mapping[str, str]]]) -> RelationState:
    """Parse every configurator unit's databag into a spec, a held spec, or nothing yet.

    ``units`` is (unit name, databag) in a stable order. A unit whose data breaks the
    contract is held (blocking) so its live scaleset is left serving; one whose image is
    not known yet is held (waiting) for the same reason.
    """
    specs: list[ScalesetSpec] = []
    held: list[HeldSpec] = []
    silent: list[str] = []
    for unit, data in units:
        if not ConfiguratorUnitData.has_scaleset(data):
            silent.append(unit)
            continue
        try:
            parsed = ConfiguratorUnitData.from_databag(data)
        except DatabagError as exc:
            logger.error("garm-configurator unit %s published invalid data: %s", unit, exc)
            held.append(HeldSpec(unit, _raw_name(data), f"invalid {exc}"))
            continue
        if parsed.image_id is None:
            held.append(HeldSpec(unit, parsed.name, "image_id not published yet", False))
            continue
        specs.append(spec_from_unit(unit, parsed))
    return RelationState(related, Desired(tuple(specs), tuple(held)), tuple(silent))


def _raw_name(data: Mapping[str, str]) -> str:
    """The name an invalid unit published, to keep its scaleset untouched by name."""
    return (data.get("name") or "").strip()


def spec_from_unit(unit: str, data: ConfiguratorUnitData) -> ScalesetSpec:
    """The scaleset a valid, complete unit asks for.

    Pre-install scripts reach GARM's providers as ``extra_specs.pre_install_scripts``,
    a JSON object of name to base64 script (garm-api.md §2.5).
    """
    extra_specs = {}
    if data.pre_install_scripts:
        extra_specs["pre_install_scripts"] = {
            name: base64.b64encode(script.encode()).decode()
            for name, script in sorted(data.pre_install_scripts.items())
        }
    kind, entity = ("organization", data.org) if data.org else ("repository", data.repo)
    return ScalesetSpec(
        source=unit,
        name=data.name,
        entity_kind=kind,  # type: ignore[arg-type]
        entity_name=entity or "",
        provider_name=data.provider_name,
        image=data.image_id or "",
        flavor=data.flavor,
        os_arch=data.os_arch,
        max_runners=data.max_runner,
        min_idle_runners=data.min_idle_runner,
        labels=data.labels,
        runner_group=data.runner_group,
        extra_specs=extra_specs,
    )
