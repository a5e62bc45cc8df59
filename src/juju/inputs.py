"""The leader's inputs, each read from Juju when the pass first asks for it.

The pass (``leader``) reads its inputs in the order its steps need them and stops at the
first step that cannot go on, so a hook reads nothing it does not use: a dying leader
reads its config and GARM's JWT secret but no resource, a pass stopped by its config
reads no relation, and ``network-get`` runs only when no ``external-url`` is set. Each
answer is read once per hook. The pass's tests hand it the same answers as plain values.
"""

# B019: ``cache`` on a method keeps ``self`` alive with its answers, which is what a
# reader is for: one is made per hook, and dies with it.
# ruff: noqa: B019

from __future__ import annotations

from functools import cache
from pathlib import Path

import ops

from garm.config import PostgresqlDatabase, Proxy
from garm.providers import Recorded
from garm.setup import AdminLogin
from garm.tls import Awaited, ServingTls
from juju import secrets, unit
from juju.certificates import Certificates
from juju.config import CharmConfig, ConfigError
from juju.peers import Peers
from juju.postgresql import GarmDatabase
from juju.records import Configurators, InternalSecrets, PeerRecords
from juju.view import JujuView


class LeaderReads:
    """``leader.LeaderInputs`` as one hook reads them from Juju, on first use."""

    def __init__(
        self,
        charm: ops.CharmBase,
        view: JujuView,
        peers: Peers,
        database: GarmDatabase,
        certificates: Certificates,
        event: ops.EventBase | None,
    ):
        self._charm = charm
        self._model = charm.model
        self._view = view
        self._peers = peers
        self._database = database
        self._certificates = certificates
        self._event = event

    @property
    @cache
    def config(self) -> CharmConfig | ConfigError:
        """The checked config, or why it cannot be used."""
        return unit.config(self._charm)

    @property
    @cache
    def admin(self) -> AdminLogin | None:
        """GARM's admin login (the charm's secret)."""
        return secrets.read_admin(self._model)

    @property
    @cache
    def internal(self) -> InternalSecrets | None:
        """GARM's JWT secret and database passphrase (the charm's secret)."""
        return secrets.read_internal(self._model)

    @property
    @cache
    def configurators(self) -> Configurators:
        """The configurator relations and how much of them this unit sees."""
        return self._view.configurators(self._event)

    @property
    @cache
    def postgresql(self) -> PostgresqlDatabase | None:
        """The postgresql provider's usable answer."""
        return self._database.postgresql()

    @cache
    def resource(self, name: str) -> Path | None:
        """A resource's file, None when not attached."""
        return unit.attached(self._model, name)

    @property
    @cache
    def peers(self) -> PeerRecords:
        """What the peer relation holds."""
        return self._peers.records()

    @property
    @cache
    def address(self) -> str | None:
        """The unit's address on the configurator relation's network."""
        return unit.ingress_address(self._model, self._view.endpoint)

    @property
    @cache
    def tls(self) -> ServingTls | Awaited | None:
        """The certificate GARM is to serve, from the certificates relation."""
        return self._certificates.read()

    @property
    @cache
    def proxy(self) -> Proxy:
        """The model's proxy settings."""
        return unit.model_proxy()

    def read_secret(self, uri: str) -> str | None:
        """A configurator's secret's value, None when not granted (yet)."""
        return secrets.configurator_value(self._model, uri)

    @property
    @cache
    def provider_record(self) -> tuple[Recorded, ...] | None:
        """The providers a leader last configured GARM with (the charm's secret)."""
        return secrets.read_providers(self._model)
