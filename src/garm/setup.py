"""Bring GARM to where scalesets can be created: admin, controller URLs, credentials, orgs.

Same shape as the scaleset reconciler: a pure ``plan_setup`` compares what the relation
asks for with what GARM lists and returns only the writes that differ, so a settled GARM
gets none; ``apply_setup`` does them, keeping refusals per object and stopping at once
when GARM is unreachable.

GARM never returns a credential's key, so whether a stored GitHub App key is the one
asked for cannot be read back. The key's fingerprint goes into the credential's
description instead: a rotated key changes the description, and the credential is
updated. Nothing about it is stored by the charm.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from garm.client import GarmApiError, GarmClient
from garm.models import Credential, Entity, ScaleSet

logger = logging.getLogger(__name__)

MANAGED_DESCRIPTION = "Managed by the garm charm"
GITHUB_ENDPOINT = "github.com"


@dataclass(frozen=True)
class AdminLogin:
    """GARM's admin user, created on first run and used for every API call."""

    username: str
    email: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class ControllerUrls:
    """Where runners and GitHub reach GARM; GARM refuses most calls until they are set."""

    metadata_url: str
    callback_url: str
    webhook_url: str

    @classmethod
    def from_base(cls, base: str) -> ControllerUrls:
        """The URLs ``garm-cli init`` would set for this base URL (garm-api.md §1.4)."""
        base = base.rstrip("/")
        return cls(f"{base}/api/v1/metadata", f"{base}/api/v1/callbacks", f"{base}/webhooks")


@dataclass(frozen=True)
class AppCredential:
    """A GitHub App installation GARM acts as; one per (app id, installation id)."""

    app_id: int
    installation_id: int
    private_key: str

    @property
    def name(self) -> str:
        """The credential's name in GARM, stable for the installation."""
        return f"app-{self.app_id}-{self.installation_id}"

    @property
    def description(self) -> str:
        """Marks the credential as the charm's and carries the key's fingerprint."""
        fingerprint = hashlib.sha256(self.private_key.encode()).hexdigest()[:16]
        return f"{MANAGED_DESCRIPTION}; key sha256:{fingerprint}"

    def app_body(self) -> dict[str, Any]:
        """The ``app`` object of a create or update request."""
        return {
            "app_id": self.app_id,
            "installation_id": self.installation_id,
            "private_key_bytes": base64.b64encode(self.private_key.encode()).decode(),
        }


@dataclass(frozen=True)
class EntitySpec:
    """An organization (``name``) or repository (``owner/name``) and its credential."""

    kind: str
    name: str
    credentials_name: str


@dataclass(frozen=True)
class CreateCredential:
    """Create a managed GitHub App credential."""

    credential: AppCredential


@dataclass(frozen=True)
class UpdateCredential:
    """Replace a managed credential's key (its fingerprint changed)."""

    id: int
    credential: AppCredential


@dataclass(frozen=True)
class DeleteCredential:
    """Remove a managed credential nothing asks for and no entity uses."""

    id: int
    name: str


@dataclass(frozen=True)
class CreateEntity:
    """Register an organization or repository under its credential."""

    spec: EntitySpec


@dataclass(frozen=True)
class RebindEntity:
    """Point an entity at the credential the relation now names."""

    entity: Entity
    credentials_name: str


@dataclass(frozen=True)
class DeleteEntity:
    """Remove an entity nothing asks for and no scaleset lives under."""

    entity: Entity


SetupAction = (
    CreateCredential
    | UpdateCredential
    | DeleteCredential
    | CreateEntity
    | RebindEntity
    | DeleteEntity
)


def plan_setup(
    credentials: Iterable[AppCredential],
    entities: Sequence[EntitySpec],
    published: Iterable[tuple[str, str]],
    observed_credentials: Iterable[Credential],
    observed_entities: Iterable[Entity],
    scalesets: Iterable[ScaleSet],
    *,
    complete: bool = True,
) -> list[SetupAction]:
    """The credential and entity writes that bring GARM in line, in a safe order.

    Credentials come first (entities name them), deletions last. Only credentials the
    charm made (by their description) are ever deleted, and only entities bound to one of
    them. An entity is removed only when no unit names it (``published``: (kind,
    lower-cased name)) and no scaleset lives under it: GARM would refuse otherwise, and a
    draining scaleset keeps its entity. On an incomplete view of Juju (``complete``
    False) nothing is deleted or re-bound: a unit not seen yet may name it, or name it
    with its own credential (ADR 0002).
    """
    wanted_credentials = {c.name: c for c in credentials}
    have_credentials = {c.name: c for c in observed_credentials}
    actions: list[SetupAction] = []
    for name, credential in sorted(wanted_credentials.items()):
        have = have_credentials.get(name)
        if have is None:
            actions.append(CreateCredential(credential))
        elif have.description != credential.description:
            actions.append(UpdateCredential(have.id, credential))
    managed = {
        n for n, c in have_credentials.items() if c.description.startswith(MANAGED_DESCRIPTION)
    }
    entity_actions, kept = _plan_entities(
        entities, published, observed_entities, scalesets, managed
    )
    actions += entity_actions
    used = {e.credentials_name for e in kept} | {e.credentials_name for e in entities}
    for name, have in sorted(have_credentials.items()):
        if name in managed and name not in wanted_credentials and name not in used:
            actions.append(DeleteCredential(have.id, name))
    if not complete:
        held = DeleteEntity | DeleteCredential | RebindEntity
        return [a for a in actions if not isinstance(a, held)]
    return actions


def _plan_entities(
    entities: Iterable[EntitySpec],
    published: Iterable[tuple[str, str]],
    observed_entities: Iterable[Entity],
    scalesets: Iterable[ScaleSet],
    managed: set[str],
) -> tuple[list[SetupAction], list[Entity]]:
    """Entity creates, re-binds and deletes, and the observed entities that stay.

    Only entities bound to a credential the charm made are ever removed: one an operator
    registered by hand is not the charm's to delete.
    """
    wanted = {(e.kind, e.name.lower()): e for e in entities}
    have = {(e.kind, e.name.lower()): e for e in observed_entities}
    actions: list[SetupAction] = []
    for key, spec in sorted(wanted.items()):
        entity = have.get(key)
        if entity is None:
            actions.append(CreateEntity(spec))
        elif entity.credentials_name != spec.credentials_name:
            actions.append(RebindEntity(entity, spec.credentials_name))
    in_use = {s.entity_id for s in scalesets}
    named = set(published) | set(wanted)
    kept = []
    for key, entity in sorted(have.items()):
        if key in named or entity.id in in_use or entity.credentials_name not in managed:
            kept.append(entity)
        else:
            actions.append(DeleteEntity(entity))
    return actions, kept


def ensure_admin_and_urls(
    client: GarmClient, admin: AdminLogin, urls: ControllerUrls
) -> list[str]:
    """First run and controller URLs, each only when needed; returns what was done.

    First run happens only when GARM says it has no admin yet, and URLs are written only
    when they differ, so a settled GARM costs one read here.
    """
    done = []
    try:
        have = client.get_controller()
    except GarmApiError as exc:
        if (exc.status, exc.error) != (409, "init_required"):
            raise
        if client.first_run(admin.username, admin.email, admin.password):
            done.append("created the admin user")
        have = client.get_controller()
    changes = {
        key: value
        for key, value in (
            ("metadata_url", urls.metadata_url),
            ("callback_url", urls.callback_url),
            ("webhook_url", urls.webhook_url),
        )
        if getattr(have, key) != value
    }
    if changes:
        client.update_controller(changes)
        done.append(f"set controller URLs ({', '.join(sorted(changes))})")
    return done


@dataclass(frozen=True)
class SetupOutcome:
    """What the setup writes did, and what GARM refused (the pass goes on without it)."""

    done: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


def apply_setup(client: GarmClient, actions: Iterable[SetupAction]) -> SetupOutcome:
    """Do the planned setup writes; an unreachable GARM propagates and ends the pass."""
    done: list[str] = []
    errors: list[str] = []
    for action in actions:
        text = describe_setup(action)
        try:
            _apply(client, action)
        except GarmApiError as exc:
            logger.error("GARM refused to %s: %s", text, exc)
            errors.append(f"{text}: {exc.cause}")
            continue
        logger.info("done: %s", text)
        done.append(text)
    return SetupOutcome(tuple(done), tuple(errors))


def _apply(client: GarmClient, action: SetupAction) -> None:
    if isinstance(action, CreateCredential):
        credential = action.credential
        client.create_credential(
            {
                "name": credential.name,
                "description": credential.description,
                "endpoint": GITHUB_ENDPOINT,
                "auth_type": "app",
                "app": credential.app_body(),
            }
        )
    elif isinstance(action, UpdateCredential):
        credential = action.credential
        client.update_credential(
            action.id, {"description": credential.description, "app": credential.app_body()}
        )
    elif isinstance(action, DeleteCredential):
        client.delete_credential(action.id)
    elif isinstance(action, CreateEntity):
        spec = action.spec
        # Scale sets need no webhooks, but GARM requires a secret; nobody needs it back.
        body = {
            "credentials_name": spec.credentials_name,
            "webhook_secret": secrets.token_urlsafe(32),
            "forge_type": "github",
        }
        if spec.kind == "repository":
            owner, _, name = spec.name.partition("/")
            body |= {"owner": owner, "name": name}
        else:
            body["name"] = spec.name
        client.create_entity(spec.kind, body)
    elif isinstance(action, RebindEntity):
        client.update_entity(action.entity, {"credentials_name": action.credentials_name})
    else:
        client.delete_entity(action.entity)


def describe_setup(action: SetupAction) -> str:
    """A log line for a setup write, without any secret."""
    if isinstance(action, CreateCredential):
        return f"create GitHub credential {action.credential.name}"
    if isinstance(action, UpdateCredential):
        return f"update the key of GitHub credential {action.credential.name}"
    if isinstance(action, DeleteCredential):
        return f"delete GitHub credential {action.name}"
    if isinstance(action, CreateEntity):
        return f"register {action.spec.kind} {action.spec.name}"
    if isinstance(action, RebindEntity):
        return f"bind {action.entity.kind} {action.entity.name} to {action.credentials_name}"
    return f"remove {action.entity.kind} {action.entity.name}"
