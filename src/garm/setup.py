"""Bring GARM to where scalesets can be created: admin, controller URLs, credentials, orgs.

Same shape as the scaleset reconciler: the pure ``plan_controller`` and ``plan_setup``
compare what the charm asks for with what GARM holds and return only the writes that
differ, so a settled GARM gets none; ``apply_setup`` does them through the one memory of
refusals (``garm.refusals``, ADR 0003): a write GARM refused waits out its back-off, is
told until GARM takes it, and holds back no other write.

GARM never returns a credential's key, so whether a stored GitHub App key is the one
asked for cannot be read back. The key's fingerprint goes into the credential's
description instead: a rotated key changes the description, and the credential is
updated. Nothing about it is stored by the charm.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import logging
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from garm.client import GarmApiError, GarmUnreachable
from garm.models import ControllerInfo, Credential, Entity, ScaleSet
from garm.refusals import Held, Refusals, digest, is_permanent

logger = logging.getLogger(__name__)
# Until the leader's first hook has made the charm's secrets (``juju.secrets.ensure``).
NO_ADMIN_YET = "GARM's admin login is not made yet; try again after the next hook"
# Where a pass tells what it does: this module's logger, or the ``plan`` action's rehearsal.
Log = logging.Logger | logging.LoggerAdapter[logging.Logger]

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
    """Where runners and GitHub reach GARM, and the CA runners check it by.

    GARM refuses most calls until the URLs are set. ``ca_bundle`` is GARM's controller
    ``ca_cert_bundle``, which GARM hands every new runner (``garm.tls``): the CA of GARM's
    own certificate, or empty when GARM serves plain HTTP. The charm owns it.
    """

    metadata_url: str
    callback_url: str
    webhook_url: str
    ca_bundle: bytes = b""

    @classmethod
    def from_base(cls, base: str, ca_bundle: bytes = b"") -> ControllerUrls:
        """The URLs ``garm-cli init`` sets for this base (docs/reference/garm-api.md §1.4)."""
        base = base.rstrip("/")
        urls = (f"{base}/api/v1/metadata", f"{base}/api/v1/callbacks", f"{base}/webhooks")
        return cls(*urls, ca_bundle)


@dataclass(frozen=True)
class AppCredential:
    """A GitHub App installation GARM acts as; one per (app id, installation id).

    ``source`` is the unit that asked for it, for the operator to read.
    """

    app_id: int
    installation_id: int
    private_key: str = field(repr=False)
    source: str = field(default="", compare=False)

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
    """An organization (``name``) or repository (``owner/name``) and its credential.

    ``source`` is the unit that asked for it, for the operator to read.
    """

    kind: str
    name: str
    credentials_name: str
    source: str = field(default="", compare=False)


@dataclass(frozen=True)
class CreateAdmin:
    """GARM's first run: the admin user every call logs in as."""

    admin: AdminLogin


@dataclass(frozen=True)
class SetControllerUrls:
    """Set the controller URLs that differ from those asked for (and agent tools sync off)."""

    changes: dict[str, str | bool]


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
    CreateAdmin
    | SetControllerUrls
    | CreateCredential
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


class SetupClient(Protocol):
    """What setup asks of GARM: GARM itself, or the ``plan`` action's stand-in for it."""

    def get_controller(self) -> ControllerInfo:
        """The controller's URLs."""
        ...

    def first_run(self, username: str, email: str, password: str) -> bool:
        """Create the admin user; False when there is one."""
        ...

    def update_controller(self, changes: dict[str, Any]) -> ControllerInfo:
        """Set controller URLs."""
        ...

    def create_credential(self, body: dict[str, Any]) -> Credential:
        """Create a GitHub credential."""
        ...

    def update_credential(self, credential_id: int, body: dict[str, Any]) -> Credential:
        """Change a GitHub credential."""
        ...

    def delete_credential(self, credential_id: int) -> None:
        """Delete a GitHub credential."""
        ...

    def create_entity(self, kind: str, body: dict[str, Any]) -> Entity:
        """Register an organization or repository."""
        ...

    def update_entity(self, entity: Entity, body: dict[str, Any]) -> None:
        """Change an entity's credential."""
        ...

    def delete_entity(self, entity: Entity) -> None:
        """Remove an entity."""
        ...


def read_controller(client: SetupClient) -> ControllerInfo | None:
    """The controller (its URLs and id), or None when GARM has no admin yet (first run is due)."""
    try:
        return client.get_controller()
    except GarmApiError as exc:
        if (exc.status, exc.error) != (409, "init_required"):
            raise
        return None


def plan_controller(
    have: ControllerInfo | None, admin: AdminLogin, urls: ControllerUrls
) -> list[SetupAction]:
    """First run when GARM has no admin (``have`` None), else the URLs that differ.

    Agent tools sync is turned off if it is on (GARM's default is off; an operator or
    another tool may have turned it on): the charm runs no garm-agent, and the sync
    downloads every new release into GARM's database. After a first run the controller
    is read again and planned again: a settled GARM costs one read here and gets no write.
    The CA bundle is compared as GARM stores it (the bytes sent); none wanted clears it.
    """
    if have is None:
        return [CreateAdmin(admin)]
    changes: dict[str, str | bool] = {
        key: value
        for key, value in (
            ("metadata_url", urls.metadata_url),
            ("callback_url", urls.callback_url),
            ("webhook_url", urls.webhook_url),
        )
        if getattr(have, key) != value
    }
    if have.agent_tools_sync:
        changes["enable_agent_tools_sync"] = False
    if have.ca_cert_bundle != urls.ca_bundle:
        if urls.ca_bundle:
            changes["ca_cert_bundle"] = base64.b64encode(urls.ca_bundle).decode()
        else:
            changes["clear_ca_cert_bundle"] = True
    return [SetControllerUrls(changes)] if changes else []


@dataclass(frozen=True)
class SetupOutcome:
    """What the setup writes did, what GARM refused, and the memory of refusals after.

    ``held`` are the writes held back by an earlier refusal or refused now
    (``garm.refusals``): the status tells them, and the pass goes on without them.
    ``ready`` False: GARM takes no other call yet (no admin, or no controller URLs)
    because its write is held. ``unreachable`` is why GARM stopped answering, if it did.
    """

    memory: Refusals = field(default_factory=Refusals)
    done: tuple[str, ...] = ()
    held: tuple[Held, ...] = ()
    ready: bool = True
    unreachable: str | None = None


def ensure_controller(
    client: SetupClient,
    have: ControllerInfo | None,
    admin: AdminLogin,
    urls: ControllerUrls,
    so_far: SetupOutcome,
    now: datetime,
    log: Log = logger,
) -> tuple[SetupOutcome, ControllerInfo | None]:
    """First run and controller URLs, each only when needed, through the one memory.

    ``have`` is the controller as ``read_controller`` answered it, read by the caller so
    that it can tell whose GARM this is before anything is written (``garm.identity``).
    Returned with the outcome: the controller as GARM then answers, its first run done
    (None while that is held back), so that a new GARM's id is known in the same pass.

    GARM answers ``urls_required`` to every other call until the metadata and callback
    URLs are set (docs/reference/garm-api.md §1.4): while their write is held, nothing
    else is ready. A change of URLs it already has that it refuses holds nothing else.
    """
    if have is None:
        so_far = apply_setup(client, plan_controller(None, admin, urls), so_far, now, log)
        if so_far.held or so_far.unreachable:
            return dataclasses.replace(so_far, ready=False), None
        have = client.get_controller()
    held = len(so_far.held)
    so_far = apply_setup(client, plan_controller(have, admin, urls), so_far, now, log)
    if len(so_far.held) > held and not (have.metadata_url and have.callback_url):
        return dataclasses.replace(so_far, ready=False), have
    return so_far, have


def apply_setup(
    client: SetupClient,
    actions: Iterable[SetupAction],
    so_far: SetupOutcome,
    now: datetime,
    log: Log = logger,
) -> SetupOutcome:
    """Do the planned setup writes the memory does not hold back, going on from ``so_far``.

    A refusal is noted (``garm.refusals``) and the next write goes on; an entity naming
    a credential GARM does not have yet waits for it, unsent (GARM would refuse it). An
    unreachable GARM ends the writes, with what was learnt kept.
    """
    memory, done, held = so_far.memory, list(so_far.done), list(so_far.held)
    absent: set[str] = set()
    for action in actions:
        text = describe_setup(action)
        key, asked = setup_key(action)
        refusal = memory.holding(key, asked, now)
        if refusal is None and _waits_for(action) in absent:
            log.info("not yet: %s (its GitHub credential is not in GARM)", text)
            continue
        if refusal is None:
            try:
                _apply(client, action, log)
            except GarmUnreachable as exc:
                log.error("GARM unreachable during %s: %s", text, exc)
                return SetupOutcome(memory, tuple(done), tuple(held), unreachable=str(exc))
            except GarmApiError as exc:
                log.error("GARM refused to %s: %s", text, exc)
                memory = memory.refused(key, asked, now, exc.cause, is_permanent(exc.status))
                refusal = memory.refusals[key]
            else:
                log.info("done: %s", text)
                done.append(text)
                memory = memory.accepted(key)
                if isinstance(action, _GITHUB_ACCESS):
                    # A create or an update GitHub refused may have been refused for want
                    # of this access (a key, an App's installation): it goes again now.
                    memory = memory.due_now(now, lambda k: k.startswith(_GITHUB_WRITES))
                continue
        held.append(Held(text, refusal))
        if isinstance(action, CreateCredential):
            absent.add(action.credential.name)
    return SetupOutcome(memory, tuple(done), tuple(held))


# The setup writes that change how GARM reaches GitHub, and the scaleset writes GitHub
# may have refused for want of it (a runner's removal or a kept delete is refused for a
# job still running or the App's rights, which no new key changes).
_GITHUB_ACCESS = (CreateCredential, UpdateCredential, RebindEntity)
_GITHUB_WRITES = ("create:", "update:")


def setup_key(action: SetupAction) -> tuple[str, str]:
    """The write's key in the memory of refusals, and a digest of what it asks for.

    A credential's digest is its description, which carries the key's fingerprint: a
    new key is a new request, sent at once. The admin's password takes no part.
    """
    if isinstance(action, CreateAdmin):
        return "first-run", digest([action.admin.username, action.admin.email])
    if isinstance(action, SetControllerUrls):
        return "controller", digest(action.changes)
    if isinstance(action, CreateCredential | UpdateCredential):
        return f"credential:{action.credential.name}", digest(action.credential.description)
    if isinstance(action, DeleteCredential):
        return f"credential-delete:{action.name}", digest(action.id)
    if isinstance(action, CreateEntity):
        spec = action.spec
        return f"entity:{spec.kind}:{spec.name.lower()}", digest(spec.credentials_name)
    if isinstance(action, RebindEntity):
        entity = action.entity
        return f"entity:{entity.kind}:{entity.name.lower()}", digest(action.credentials_name)
    entity = action.entity
    return f"entity-delete:{entity.kind}:{entity.name.lower()}", digest(entity.id)


def _waits_for(action: SetupAction) -> str | None:
    """The credential an entity write names, which GARM must have first."""
    if isinstance(action, CreateEntity):
        return action.spec.credentials_name
    if isinstance(action, RebindEntity):
        return action.credentials_name
    return None


def _apply(client: SetupClient, action: SetupAction, log: Log) -> None:
    if isinstance(action, CreateAdmin):
        admin = action.admin
        if not client.first_run(admin.username, admin.email, admin.password):
            log.info("GARM already had an admin user")
    elif isinstance(action, SetControllerUrls):
        client.update_controller(action.changes)
    elif isinstance(action, CreateCredential):
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
    """A write as the operator reads it, naming the unit that asked for it; no secret."""
    if isinstance(action, CreateAdmin):
        return "create GARM's admin user"
    if isinstance(action, SetControllerUrls):
        return f"set GARM's controller URLs ({', '.join(sorted(action.changes))})"
    if isinstance(action, CreateCredential):
        return f"create GitHub credential {action.credential.name}{_of(action.credential)}"
    if isinstance(action, UpdateCredential):
        credential = action.credential
        return f"update the key of GitHub credential {credential.name}{_of(credential)}"
    if isinstance(action, DeleteCredential):
        return f"delete GitHub credential {action.name}"
    if isinstance(action, CreateEntity):
        return f"register {action.spec.kind} {action.spec.name}{_of(action.spec)}"
    if isinstance(action, RebindEntity):
        entity = action.entity
        return f"bind {entity.kind} {entity.name} to {action.credentials_name}"
    return f"remove {action.entity.kind} {action.entity.name}"


def _of(asked: AppCredential | EntitySpec) -> str:
    return f" for {asked.source}" if asked.source else ""
