"""A PostgreSQL provider for tests: the interface library's provider side, as postgresql."""

from __future__ import annotations

import ops
from dpcharmlibs.interfaces import (
    RequirerCommonModel,
    ResourceProviderEventHandler,
    ResourceProviderModel,
    ResourceRequestedEvent,
)
from ops import testing

USERNAME = "relation_id_7"
PASSWORD = "pg-Pa55word-first"
NEW_PASSWORD = "pg-Pa55word-rotated"
REL_ID = 7


PROVIDER_META = {
    "name": "postgresql",
    "provides": {"database": {"interface": "postgresql_client"}},
}
PROVIDER_CONFIG = {
    "options": {
        "endpoints": {"type": "string", "default": "db.example:6432"},
        # False: answer with endpoints before the user exists (no credentials secret yet).
        "credentials": {"type": "boolean", "default": True},
    }
}


class ProviderCharm(ops.CharmBase):
    """Answers each request the way a V1 PostgreSQL charm does, as configured."""

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self.provided = ResourceProviderEventHandler(self, "database", RequirerCommonModel)
        framework.observe(self.provided.on.resource_requested, self._on_requested)
        # A moved primary: the provider re-sends its answer with new endpoints.
        framework.observe(self.on.config_changed, self._on_config_changed)

    def _on_requested(self, event: ResourceRequestedEvent) -> None:
        self._answer(event.relation, event.request)

    def _on_config_changed(self, _: ops.ConfigChangedEvent) -> None:
        for relation in self.model.relations["database"]:
            for request in self.provided.requests(relation):
                self._answer(relation, request)

    def _answer(self, relation: ops.Relation, request: RequirerCommonModel) -> None:
        response = ResourceProviderModel(
            salt=request.salt,
            request_id=request.request_id,
            resource=request.resource,
            endpoints=str(self.config["endpoints"]),
        )
        if self.config["credentials"]:
            response.username = USERNAME
            response.password = PASSWORD
        self.provided.set_response(relation.id, response)


def provider_answers(
    provider: testing.Context[ProviderCharm],
    request: testing.Relation,
    endpoints: str,
    credentials: bool = True,
) -> testing.State:
    """The provider's state after it saw the request and answered it."""
    relation = testing.Relation(
        "database", remote_app_name="garm", id=3, remote_app_data=request.local_app_data
    )
    config = {"endpoints": endpoints, "credentials": credentials}
    state = testing.State(leader=True, relations={relation}, config=config)
    return provider.run(provider.on.relation_changed(relation, remote_unit=0), state)


def seen_by_requirer(provider_state: testing.State) -> tuple[dict[str, str], set[testing.Secret]]:
    """The provider's app databag, and its credentials secret (if any) as granted to us."""
    (relation,) = provider_state.relations
    # A consumer's first read gets the latest revision; labels are per owner or consumer,
    # so the provider's label does not come along.
    granted = {testing.Secret(s.latest_content, id=s.id) for s in provider_state.secrets}
    return dict(relation.local_app_data), granted
