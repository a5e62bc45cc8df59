"""GARM's PostgreSQL database, requested over ``postgresql_client``.

The requirer of ``dpcharmlibs-interfaces`` (V1) writes the request for database ``garm``
and resolves the credentials' secret; this turns its answer into a ``PostgresqlDatabase``.
"""

from __future__ import annotations

import logging
import warnings
from urllib.parse import urlsplit

import ops

# Its models put Field() defaults where pydantic >= 2.12 ignores them, and says so in
# every hook's log; harmless, silenced for this import only.
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
    """The ``postgresql_client`` requirer, made in every hook (the library observes events)."""

    def __init__(self, charm: ops.CharmBase) -> None:
        self._charm = charm
        self._requirer = ResourceRequirerEventHandler(
            charm,
            RELATION,
            [RequirerCommonModel(resource=DATABASE_NAME)],
            response_model=ResourceProviderModel,
        )

    def postgresql(self) -> PostgresqlDatabase | None:
        """Where GARM's database is; None until fully answered, or unusable (logged)."""
        relation = self._charm.model.get_relation(RELATION)
        if relation is None or relation.app is None:
            return None
        try:
            contract = self._requirer.interface.build_model(relation.id, component=relation.app)
            response = next((r for r in contract.requests if r.resource == DATABASE_NAME), None)
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
        # ValueError: pydantic's ValidationError (of the databag alone, before the secret
        # is read) or a bad host or port; none quotes the credentials.
        except (ValueError, ops.SecretNotFoundError) as e:
            logger.warning("Unusable answer on %s: %r", RELATION, e)
            return None


def _first_endpoint(endpoints: str) -> tuple[str, int]:
    """Host and port of the first ``host:port`` (GARM has no multi-host form)."""
    first = endpoints.split(",")[0].strip()
    # urlsplit handles a bracketed IPv6 literal and rejects a non-numeric port.
    parts = urlsplit(f"//{first}")
    if not parts.hostname:
        raise ValueError(f"endpoint has no host: {first!r}")
    return parts.hostname, DEFAULT_PORT if parts.port is None else parts.port
