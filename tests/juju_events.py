"""Juju events ops.testing cannot express on its own.

ops.testing names the departing unit of a ``-departed`` hook after the *remote*
application, so it cannot say what Juju says on a unit being removed: that the departing
unit is this unit itself (``JUJU_DEPARTING_UNIT`` = the local unit,
docs/explanation/juju-lifecycle.md §2). ``self_departing`` sets exactly that variable,
and nothing else, for the hooks run inside it; the charm then reads it through ops as it
would under Juju. Nor does it offer ``leader-settings-changed`` (deprecated in ops,
still what Juju 3.6 runs on a deposed leader, docs/explanation/juju-lifecycle.md §3):
``leader_settings_changed`` builds that hook. Nor can it dispatch what the reconcile
timer dispatches through juju-exec (``JUJU_DISPATCH_PATH=hooks/reconcile-tick``):
``reconcile_tick`` does, so ops finds the charm's event by that path exactly as under
Juju.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from scenario import _runtime
from scenario.state import _Event


def leader_settings_changed() -> _Event:
    """The hook a leader that lost leadership while alive gets."""
    return _Event("leader_settings_changed")


def reconcile_tick() -> _Event:
    """What the leader's reconcile timer dispatches (``garm.timer``)."""
    return _Event("reconcile_tick")


@contextlib.contextmanager
def self_departing(unit: str = "garm/0") -> Iterator[None]:
    """Run ``-departed`` hooks as seen on ``unit`` while it is being removed."""
    original = _runtime.Runtime._get_event_env

    def env_of(self, state, event, charm_root):
        env = original(self, state, event, charm_root)
        if event.name.endswith("_relation_departed"):
            env["JUJU_DEPARTING_UNIT"] = unit
        return env

    _runtime.Runtime._get_event_env = env_of  # type: ignore[method-assign]
    try:
        yield
    finally:
        _runtime.Runtime._get_event_env = original  # type: ignore[method-assign]
