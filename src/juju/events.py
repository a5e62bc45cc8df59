"""The events the charm runs its pass on, and the one its reconcile timer dispatches.

Every event after which what GARM should hold may have changed runs one holistic pass:
Juju's lifecycle events, the changes of each relation that feeds the pass, and
``reconcile-tick``, which the leader's timer (``garm.timer``) and the requeue
(``garm.requeue``) dispatch with juju-exec. ``changes`` binds them on a charm.
"""

from __future__ import annotations

import ops

from juju.certificates import RELATION as CERTIFICATES
from juju.peers import PEERS
from juju.postgresql import RELATION as POSTGRESQL
from juju.view import DEBUG_SSH
from observe.cos_agent import RELATION as COS_AGENT

CONFIGURATOR = "garm-configurator"
CHANGES = ("install", "start", "upgrade_charm", "config_changed", "leader_elected")
CHANGES += ("leader_settings_changed", "update_status", "secret_changed", "reconcile_tick")
RELATION_CHANGES = {
    CONFIGURATOR: ("created", "joined", "changed", "departed", "broken"),
    POSTGRESQL: ("joined", "changed", "departed", "broken"),
    PEERS: ("changed", "departed"),
    DEBUG_SSH: ("changed", "departed", "broken"),
    COS_AGENT: ("created", "joined", "changed"),
    # Seen after the interface library's own handlers, which observe first: a
    # certificate that came is in the databag the pass reads.
    CERTIFICATES: ("created", "changed", "broken"),
}


class ReconcileTickEvent(ops.EventBase):
    """The leader's reconcile timer fired (``garm.timer``): run a pass now."""


class GarmEvents(ops.CharmEvents):
    """Juju's events, and the one the reconcile timer dispatches with juju-exec."""

    reconcile_tick = ops.EventSource(ReconcileTickEvent)


def changes(charm: ops.CharmBase) -> list[ops.BoundEvent]:
    """Every event of ``charm`` that runs a pass."""
    events = [getattr(charm.on, name) for name in CHANGES]
    for endpoint, kinds in RELATION_CHANGES.items():
        events += [getattr(charm.on[endpoint], f"relation_{kind}") for kind in kinds]
    return events
