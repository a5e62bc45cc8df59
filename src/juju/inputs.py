"""The leader's inputs as one hook reads them from Juju (``records.LeaderInputs``).

Each reader below runs when the pass first asks for its answer, once per hook; the
pass's tests hand the same type their answers instead.
"""

from __future__ import annotations

import ops

from juju import secrets, unit
from juju.certificates import Certificates
from juju.peers import Peers
from juju.postgresql import GarmDatabase
from juju.records import LeaderInputs
from juju.view import JujuView


def read(
    charm: ops.CharmBase,
    view: JujuView,
    peers: Peers,
    database: GarmDatabase,
    certificates: Certificates,
    event: ops.EventBase | None,
) -> LeaderInputs:
    """The leader's inputs, each read from Juju when the pass first needs it."""
    model = charm.model
    return LeaderInputs(
        config=lambda: unit.config(charm),
        admin=lambda: secrets.read_admin(model),
        internal=lambda: secrets.read_internal(model),
        configurators=lambda: view.configurators(event),
        postgresql=database.postgresql,
        peers=peers.records,
        # On the configurator relation's network: where runners reach this unit.
        address=lambda: unit.ingress_address(model, view.endpoint),
        tls=certificates.read,
        proxy=unit.model_proxy,
        provider_record=lambda: secrets.read_providers(model),
        resource=lambda name: unit.attached(model, name),
        read_secret=lambda uri: secrets.configurator_value(model, uri),
    )
