"""One Juju hook of the real charm on a tier's machine: ops.testing for Juju, the rest real.

Run in the tier's container as a child of its systemd, as the Juju agent runs a hook:
``python3 -m tests.machine_tier.hook <event> [--config key=value ...]``, by a test
(``tests.nspawn.Machine.run``) or by the charm's own timers through ``juju-exec``
(``tests.machine_tier.juju_exec``). The charm (``charm.GarmCharm``) runs through
``ops.testing``, which stands in for Juju's hook tools, its State kept between hooks in
``STATE``; everything else is the machine's own: the unit's paths, systemctl, useradd,
the resource check's sandbox, and GARM, the ``garm`` resource as attached (``ATTACHED``,
when a GARM release or a test's file is, else the simulator packaged as GARM's binary,
``tests.machine_tier.garm_server``). Hooks run one at a time, under ``LOCK``, as Juju's
machine lock makes them. It prints the unit's status after the hook, as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import pickle
from collections.abc import Callable
from typing import Any

from ops import testing

from charm import GarmCharm
from juju.peers import PEERS
from juju.secrets import ADMIN_SECRET_LABEL
from tests.binaries import fake_garm, fake_provider
from tests.charm_states import (
    CONFIGURATOR_SECRETS,
    INTERNAL_SECRET,
    configurator,
    relate_postgresql,
)
from tests.databags import EXAMPLE_UNIT
from tests.juju_events import leader_settings_changed, reconcile_tick
from tests.machine_tier import HOME, unit, units
from tests.machine_tier.database import ENDPOINT
from tests.nspawn import PYTHONPATH

STATE = HOME / "state.pickle"
LOCK = HOME / "machine-lock"
# The file attached as the garm resource, when one is (a GARM release, a test's file).
ATTACHED = HOME / "attached" / "garm"
PEER_ID = 9
# The simulator as GARM's release binary: ``--version`` as GARM answers it, anything
# else serves (as the garm user, under the unit's hardening: the code is world-readable).
SIMULATOR = (
    'if [ "${1:-}" = --version ]; then echo v0.2.1; exit 0; fi\n'
    f"PYTHONPATH={PYTHONPATH} exec /usr/bin/python3 -m tests.machine_tier.garm_server"
    ' "$@"'
)

Event = Callable[[testing.Context, testing.State], testing.State]
EVENTS: dict[str, Event] = {
    "install": lambda ctx, state: ctx.run(ctx.on.install(), state),
    "leader-elected": lambda ctx, state: ctx.run(ctx.on.leader_elected(), state),
    "leader-settings-changed": lambda ctx, state: ctx.run(leader_settings_changed(), state),  # type: ignore[arg-type]
    "update-status": lambda ctx, state: ctx.run(ctx.on.update_status(), state),
    "reconcile-tick": lambda ctx, state: ctx.run(reconcile_tick(), state),  # type: ignore[arg-type]
    "relate-postgresql": lambda ctx, state: relate_postgresql(ctx, state, ENDPOINT)[0],
    "relate-configurator": lambda ctx, state: relate_configurator(ctx, state),
    "stop": lambda ctx, state: ctx.run(ctx.on.stop(), state),
    "remove": lambda ctx, state: ctx.run(ctx.on.remove(), state),
}


def relate_configurator(ctx: testing.Context, state: testing.State) -> testing.State:
    """A garm-configurator integrated, its one unit publishing one scaleset, with its
    OpenStack and GitHub App credentials."""
    relation = configurator(EXAMPLE_UNIT)
    secrets = {s.id: s for s in [*state.secrets, *CONFIGURATOR_SECRETS]}
    state = dataclasses.replace(
        state, relations=[*state.relations, relation], secrets=list(secrets.values())
    )
    return ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)


def first_state() -> testing.State:
    """The unit as deployed (garm/0 leads), the application's secrets made."""
    peers = {int(name.split("/")[1]): {} for name in units()[1:]}
    admin = {"username": "admin", "password": "Adm1n-Pa55word-0123", "email": "admin@garm.local"}
    return testing.State(
        leader=unit() == "garm/0",
        relations=[testing.PeerRelation(PEERS, id=PEER_ID, peers_data=peers)],
        secrets=[testing.Secret(admin, label=ADMIN_SECRET_LABEL, owner="app"), INTERNAL_SECRET],
    )


def attached() -> frozenset[testing.Resource]:
    """The resources as attached now: ``ATTACHED`` or the simulator, and the provider."""
    resources = HOME / "resources"
    garm = ATTACHED if ATTACHED.exists() else resources / "garm"
    if not garm.exists():
        fake_garm(garm, SIMULATOR)
    provider = resources / "garm-provider-openstack"
    if not provider.exists():
        fake_provider(provider)
    return frozenset(
        {
            testing.Resource(name="garm", path=garm),
            testing.Resource(name="garm-provider-openstack", path=provider),
        }
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one hook of the real charm on this machine")
    parser.add_argument("event", choices=sorted(EVENTS))
    parser.add_argument("--config", action="append", default=[], help="key=value, before")
    args = parser.parse_args(argv)
    HOME.mkdir(mode=0o700, exist_ok=True)
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = pickle.loads(STATE.read_bytes()) if STATE.exists() else first_state()  # noqa: S301 (our own)
        config: dict[str, Any] = dict(state.config)
        for pair in args.config:
            key, _, value = pair.partition("=")
            config[key] = int(value) if value.isdigit() else value
        state = dataclasses.replace(state, config=config, resources=attached())
        ctx = testing.Context(GarmCharm, app_name="garm", unit_id=int(unit().split("/")[1]))
        state = EVENTS[args.event](ctx, state)
        STATE.write_bytes(pickle.dumps(state))
    status = state.unit_status
    print(json.dumps({"status": status.name, "message": status.message}))


if __name__ == "__main__":
    main()
