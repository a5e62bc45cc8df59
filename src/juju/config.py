"""The charm's config options, checked together before a pass does anything.

Refused: a value that would make a hook raise, GARM refuse it, or the charm wait for
what never comes (a URL runners cannot use). The charm is then ``blocked`` with every
``<option>: <why>`` and leaves GARM as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from observe.endpoint import PORT as METRICS_PORT
from scalesets.naming import MIN_NAME_BUDGET
from scalesets.spec import Settings

# OpenStack's 60-byte tag leaves 10 bytes for a name; no name needs more than the
# longest a configurator may publish.
MAX_NAME_BUDGET = 64
# A day without a warm runner is a change that is not happening.
MAX_HANDOVER_MINUTES = 24 * 60
# Six times GitHub's 5-day limit on a self-hosted job; also far from date overflow.
MAX_DRAIN_MINUTES = 30 * 24 * 60
# The timer's pass holds the machine lock (juju-exec): not so often that hooks queue
# behind it; past an hour, update-status comes first anyway.
MIN_RECONCILE_SECONDS = 10
MAX_RECONCILE_SECONDS = 3600
# Below it, Linux lets only a process with CAP_NET_BIND_SERVICE listen.
FIRST_UNPRIVILEGED_PORT = 1024

# Printable ASCII without space: every runner is sent the URL as typed (IDNs as xn--).
_URL_CHARACTERS = re.compile(r"[\x21-\x7e]+")
_URL_SHAPE = "must be an absolute http:// or https:// URL with a host, e.g. http://10.0.0.5:9997"


class ConfigError(ValueError):
    """Config options the operator must correct; the message is ``<option>: <why>; ...``."""


class _RefusedError(Exception):
    """Why one option's value cannot be used."""


@dataclass(frozen=True)
class CharmConfig:
    """The charm's config options (``-`` read as ``_``), every value checked when made.

    Made by ops' ``load_config`` with charmcraft.yaml's defaults, the one table of them.
    Once checked: ``external_url`` is "" when unset and never ends in ``/``;
    ``reconcile_interval`` is in seconds, 0 meaning no timer. ``paused``: the charm
    writes nothing to GARM (docs/adr/0014).
    """

    scaleset_name_budget: int
    handover_timeout_minutes: int
    drain_deadline_minutes: int
    api_port: int
    external_url: str
    reconcile_interval: int
    refresh_idle_runners: bool
    paused: bool = False

    def __post_init__(self) -> None:
        """Check every option, or raise a ConfigError naming each bad one at once."""
        problems = []
        for name, check in _CHECKS.items():
            try:
                object.__setattr__(self, name, check(getattr(self, name)))
            except _RefusedError as refused:
                problems.append(f"{name.replace('_', '-')}: {refused}")
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def settings(self) -> Settings:
        """The changeover's settings, for the scaleset pass."""
        return Settings(
            name_budget=self.scaleset_name_budget,
            handover_timeout=timedelta(minutes=self.handover_timeout_minutes),
            drain_deadline=timedelta(minutes=self.drain_deadline_minutes),
            refresh_idle_runners=self.refresh_idle_runners,
        )


def _whole(low: int, high: int, *, off: bool = False) -> Callable[[object], int]:
    """A check for a whole number from ``low`` to ``high`` (or 0, meaning off)."""
    allowed = f"0 or {low}-{high}" if off else f"{low}-{high}"

    def check(value: object) -> int:
        # bool is an int to Python, but true is no port or number of minutes.
        if not isinstance(value, int) or isinstance(value, bool):
            raise _RefusedError("must be a whole number")
        if not (low <= value <= high or (off and value == 0)):
            raise _RefusedError(f"must be {allowed}")
        return value

    return check


def _boolean(value: object) -> bool:
    """A switch: true or false, nothing that merely reads as one (1, "yes")."""
    if not isinstance(value, bool):
        raise _RefusedError("must be true or false")
    return value


def _api_port(value: object) -> int:
    """GARM's port: any TCP port but the one the charm's own metrics are served on."""
    port = _whole(1, 65535)(value)
    if port == METRICS_PORT:
        # One of the two would fail to bind, and a 404 from metrics would read as GARM's.
        raise _RefusedError(f"{port} is the charm's own metrics port: choose another")
    return port


def _base_url(value: object) -> str:
    """The URL runners reach GARM at, without a trailing ``/``; "" when unset."""
    if not isinstance(value, str):
        raise _RefusedError("must be text")
    if not value:
        return ""
    if not _URL_CHARACTERS.fullmatch(value):
        raise _RefusedError("must be printable ASCII without spaces (write a domain as xn--...)")
    try:
        parts = urlsplit(value)
        port = parts.port  # raises on a port that is not 0-65535
    except ValueError:
        raise _RefusedError(_URL_SHAPE) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise _RefusedError(_URL_SHAPE)
    if "?" in value or "#" in value:
        raise _RefusedError("must have no query or fragment: GARM appends its paths to it")
    if "@" in parts.netloc:
        raise _RefusedError("must carry no user or password: every runner is sent it")
    return value.rstrip("/")


# Each option's check, by its field name, in the order refusals are told.
_CHECKS: dict[str, Callable[[object], object]] = {
    "scaleset_name_budget": _whole(MIN_NAME_BUDGET, MAX_NAME_BUDGET),
    "handover_timeout_minutes": _whole(0, MAX_HANDOVER_MINUTES),
    "drain_deadline_minutes": _whole(0, MAX_DRAIN_MINUTES),
    "api_port": _api_port,
    "external_url": _base_url,
    "reconcile_interval": _whole(MIN_RECONCILE_SECONDS, MAX_RECONCILE_SECONDS, off=True),
    "refresh_idle_runners": _boolean,
    "paused": _boolean,
}
