"""The charm's config options, checked together before a pass does anything.

A value is refused here when it would make a hook raise (an integer no ``timedelta`` or
socket takes), make GARM refuse it, or leave the charm waiting for something that can
never happen (a URL runners cannot use). A refused value changes nothing: the charm
reports ``blocked`` with every ``<option>: <why>`` and leaves GARM as it is until the
operator corrects it. Pure: ops hands the options in (``CharmBase.load_config``), with
charmcraft.yaml's defaults for those the operator did not set.
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

# OpenStack's 60-byte tag leaves 10 bytes for a name, so more only helps with another
# provider, and no name needs to be longer than the longest a configurator may publish.
MAX_NAME_BUDGET = 64
# A day of waiting for a warm runner is a change that is not happening; retiring the old
# scaleset then is what the timeout is for.
MAX_HANDOVER_MINUTES = 24 * 60
# 30 days, six times GitHub's 5-day limit on a self-hosted job: a runner still busy then
# is stuck whatever it says. The cap also keeps date arithmetic far from overflowing.
MAX_DRAIN_MINUTES = 30 * 24 * 60
# The timer runs a pass through juju-exec, which holds the machine lock: more often than
# this would keep hooks queueing behind it; less often than hourly, update-status (every
# 5 minutes by default) already comes first.
MIN_RECONCILE_SECONDS = 10
MAX_RECONCILE_SECONDS = 3600
# Linux lets only a process with CAP_NET_BIND_SERVICE listen below this port, so GARM,
# an unprivileged user, is given that capability for a lower api-port.
FIRST_UNPRIVILEGED_PORT = 1024

# Printable ASCII without space: a URL that is sent to every runner as typed, so nothing
# invisible may hide in it. An international domain name is written in its xn-- form.
_URL_CHARACTERS = re.compile(r"[\x21-\x7e]+")
_URL_SHAPE = "must be an absolute http:// or https:// URL with a host, e.g. http://10.0.0.5:9997"


class ConfigError(ValueError):
    """Config options the operator must correct; the message is ``<option>: <why>; ...``."""


class _RefusedError(Exception):
    """Why one option's value cannot be used."""


@dataclass(frozen=True)
class CharmConfig:
    """The charm's config options, every value checked when it is made.

    ops' ``CharmBase.load_config`` makes it from the options Juju hands the hook, which
    carry charmcraft.yaml's defaults: that file is the one table of them. The fields are
    the options (``-`` read as ``_``), as Juju gives them until ``__post_init__`` has
    checked them, then as a pass uses them: ``external_url`` is "" when unset (runners
    then use this unit's address) and never ends in ``/``; ``reconcile_interval`` is in
    seconds, 0 meaning no timer.
    """

    scaleset_name_budget: int
    handover_timeout_minutes: int
    drain_deadline_minutes: int
    api_port: int
    external_url: str
    reconcile_interval: int
    refresh_idle_runners: bool

    def __post_init__(self) -> None:
        """Check every option, or raise a ConfigError naming each bad one.

        All options are checked before any is refused, so the operator sees every problem
        at once instead of one per ``juju config``.
        """
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
        # Whichever of the two binds first, the other fails, and a pass reading the metrics
        # server's 404 as GARM answering would fail with a misleading setup error.
        raise _RefusedError(f"{port} is the charm's own metrics port: choose another")
    return port


def _base_url(value: object) -> str:
    """The URL runners reach GARM at, without a trailing ``/``; "" when unset.

    GARM appends its own paths (``/api/v1/metadata`` ...) to it, so a path prefix behind
    a proxy works but a query or fragment would end up in the middle of every URL. A user
    or password in it would be handed to every runner.
    """
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
}
