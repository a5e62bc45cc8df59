"""GARM's PostgreSQL database, requested over ``postgresql_client``.

A thin wrapper around the requirer side of ``dpcharmlibs-interfaces`` (V1 contract): it
asks for one database named ``garm`` and turns the provider's answer into the
``PostgresqlDatabase`` GARM's config is rendered from. The library does the wire work:
it writes the request into our app databag when the relation is created (leader only)
and resolves the credentials from the Juju secret the provider points at.
"""

from __future__ import annotations

import logging
import warnings
from urllib.parse import urlsplit

import ops

# The library's models put Field() defaults where pydantic >= 2.12 ignores them and says
# so at import, on stderr, in every hook's log. Harmless to us (the fields are optional
# either way); silenced for this import only, so our own code still warns.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*has no effect in the context it was used")
    from dpcharmlibs.interfaces import (
        RequirerCommonModel,
        ResourceProviderModel,
        ResourceRequirerEventHandler,
    )

from garm.config import PostgresqlDatabase

logger = logging.getLogger(__name__)

RELATION = "postgresql"
DATABASE_NAME = "garm"
# libpq's default, for an endpoint that names no port.
DEFAULT_PORT = 5432


class GarmDatabase:
    """The ``postgresql_client`` requirer for GARM's database.

    Construct it in the charm's ``__init__``, so it exists in every hook: the library
    writes the request in relation-created and maps secret-changed on the credentials
    to ``authentication_updated``, and does neither unless it is observing then.
    """

    def __init__(self, charm: ops.CharmBase, relation_name: str) -> None:
        self._charm = charm
        self._relation_name = relation_name
        self._requirer = ResourceRequirerEventHandler(
            charm,
            relation_name,
            [RequirerCommonModel(resource=DATABASE_NAME)],
            response_model=ResourceProviderModel,
        )

    def postgresql(self) -> PostgresqlDatabase | None:
        """Where GARM's database is, or None until the provider has fully answered.

        None also when the answer cannot be used (a malformed endpoint, a credentials
        secret we cannot read); the reason is logged, never the credentials.
        """
        relation = self._charm.model.get_relation(self._relation_name)
        if relation is None or relation.app is None:
            return None
        try:
            contract = self._requirer.interface.build_model(relation.id, component=relation.app)
            response = next(
                (r for r in contract.requests if r.resource == DATABASE_NAME),
                None,
            )
            if response is None or not (
                response.endpoints and response.username and response.password
            ):
                return None
            hostname, port = _first_endpoint(response.endpoints)
            return PostgresqlDatabase(
                hostname=hostname,
                port=port,
                username=response.username,
                password=response.password,
                database=DATABASE_NAME,
            )
        # ValueError covers pydantic's ValidationError (a malformed databag) as well as a
        # bad host or port. None of them quotes the credentials: pydantic validates only
        # the databag (the secret's content is filled in afterwards), and
        # PostgresqlDatabase checks only the port and sslmode.
        except (ValueError, ops.SecretNotFoundError) as e:
            logger.warning("Unusable answer on %s: %r", self._relation_name, e)
            return None


def _first_endpoint(endpoints: str) -> tuple[str, int]:
    """Host and port of the first of the provider's comma-separated ``host:port`` list.

    GARM's config has no multi-host form, so any further endpoints are ignored.
    """
    first = endpoints.split(",")[0].strip()
    # urlsplit handles a bracketed IPv6 literal and rejects a non-numeric port.
    parts = urlsplit(f"//{first}")
    if not parts.hostname:
        raise ValueError(f"endpoint has no host: {first!r}")
    return parts.hostname, DEFAULT_PORT if parts.port is None else parts.port
