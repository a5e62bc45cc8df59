"""Bring GARM to where scalesets can be created: admin, controller URLs, credentials, orgs.

Same shape as the scaleset reconciler: the pure ``plan_controller`` and ``plan_setup``
compare what the charm asks for with what GARM holds and return only the writes that
differ, so a settled GARM gets none; each is a ``garm.writes.Write``, sent through the
one loop into the pass's ledger, in which the scalesets' writes go on (ADR 0003).

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

from garm.client import GarmApiError
from garm.models import ControllerInfo, Credential, Entity, ScaleSet
from garm.recording import Garm
from garm.refusals import digest
from garm.writes import Write, Writes

logger = logging.getLogger(__name__)
# Until the leader's first hook has made the charm's secrets (``juju.secrets.ensure``).
NO_ADMIN_YET = "GARM's admin login is not made yet; try again after the next hook"

MANAGED_DESCRIPTION = "Managed by the garm charm"


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
    """A GitHub App installation GARM acts as, one per (app id, installation id)."""

    app_id: int
    installation_id: int
    private_key: str = field(repr=False)
    source: str = field(default="", compare=False)  # the unit that asked, for the operator

    @property
    def name(self) -> str:
        """The credential's name in GARM, stable for the installation."""
        return f"app-{self.app_id}-{self.installation_id}"

    @property
    def description(self) -> str:
        """Marks the credential as the charm's and carries the key's fingerprint."""
        fingerprint = hashlib.sha256(self.private_key.encode()).hexdigest()[:16]
        return f"{MANAGED_DESCRIPTION}; key sha256:{fingerprint}"


@dataclass(frozen=True)
class EntitySpec:
    """An organization (``name``) or repository (``owner/name``) and its credential."""

    kind: str
    name: str
    credentials_name: str
    source: str = field(default="", compare=False)  # the unit that asked, for the operator


# Setup writes GitHub may refuse for want of access, made due by a change of that access
# (a runner's removal or a kept delete is refused for a job still running or the App's
# rights, which no new key changes).
_GITHUB_WRITES = ("create:", "update:")


@dataclass(frozen=True)
class CreateAdmin(Write):
    """GARM's first run: the admin user every call logs in as."""

    admin: AdminLogin

    def asks(self) -> list[tuple[str, str]]:
        """The admin's password takes no part."""
        return [("first-run", digest([self.admin.username, self.admin.email]))]

    def line(self) -> str:
        """As the operator reads it."""
        return "create GARM's admin user"

    def send(self, garm: Garm, seen: None, writes: Writes) -> None:
        """GARM's first run."""
        admin = self.admin
        if not garm.first_run(admin.username, admin.email, admin.password):
            writes.log.info("GARM already had an admin user")


@dataclass(frozen=True)
class SetControllerUrls(Write):
    """Set the controller URLs that differ from those asked for (and agent tools sync off)."""

    changes: dict[str, str | bool]

    def asks(self) -> list[tuple[str, str]]:
        """One write, asking for the changes."""
        return [("controller", digest(self.changes))]

    def line(self) -> str:
        """Which of the controller's settings, never their values."""
        return f"set GARM's controller URLs ({', '.join(sorted(self.changes))})"

    def send(self, garm: Garm, seen: None, writes: Writes) -> None:
        """One PUT of the controller."""
        garm.update_controller(self.changes)


@dataclass(frozen=True)
class PutCredential(Write):
    """Create a managed GitHub App credential, or replace its key (``id``: GARM's own)."""

    credential: AppCredential
    id: int | None = None
    unlocks = _GITHUB_WRITES

    def asks(self) -> list[tuple[str, str]]:
        """By its description (the key's fingerprint): a new key is a new request, sent at once."""
        return [(f"credential:{self.credential.name}", digest(self.credential.description))]

    def line(self) -> str:
        """Naming the unit that asked for it."""
        what = "create" if self.id is None else "update the key of"
        return f"{what} GitHub credential {self.credential.name}{_of(self.credential)}"

    def makes(self) -> str | None:
        """Entities bound to a new credential wait while it is held back."""
        return self.credential.name if self.id is None else None

    def send(self, garm: Garm, seen: None, writes: Writes) -> None:
        """Create it as a GitHub App installation, or send its description and key."""
        credential = self.credential
        app = {
            "app_id": credential.app_id,
            "installation_id": credential.installation_id,
            "private_key_bytes": base64.b64encode(credential.private_key.encode()).decode(),
        }
        if self.id is not None:
            garm.update_credential(self.id, {"description": credential.description, "app": app})
            return
        garm.create_credential(
            {
                "name": credential.name,
                "description": credential.description,
                "endpoint": "github.com",
                "auth_type": "app",
                "app": app,
            }
        )


@dataclass(frozen=True)
class DeleteCredential(Write):
    """Remove a managed credential nothing asks for and no entity uses."""

    id: int
    name: str

    def asks(self) -> list[tuple[str, str]]:
        """By name."""
        return [(f"credential-delete:{self.name}", digest(self.id))]

    def line(self) -> str:
        """As the operator reads it."""
        return f"delete GitHub credential {self.name}"

    def send(self, garm: Garm, seen: None, writes: Writes) -> None:
        """Delete it."""
        garm.delete_credential(self.id)


@dataclass(frozen=True)
class CreateEntity(Write):
    """Register an organization or repository under its credential."""

    spec: EntitySpec

    def asks(self) -> list[tuple[str, str]]:
        """A create and a re-bind of one entity are one write, asking for a credential."""
        key = f"entity:{self.spec.kind}:{self.spec.name.lower()}"
        return [(key, digest(self.spec.credentials_name))]

    def line(self) -> str:
        """Naming the unit that asked for it."""
        return f"register {self.spec.kind} {self.spec.name}{_of(self.spec)}"

    def needs(self) -> str:
        """GARM refuses an entity whose credential it does not have."""
        return self.spec.credentials_name

    def send(self, garm: Garm, seen: None, writes: Writes) -> None:
        """Register it; scale sets need no webhooks, but GARM requires a secret."""
        spec = self.spec
        body = {
            "credentials_name": spec.credentials_name,
            "webhook_secret": secrets.token_urlsafe(32),  # nobody needs it back
            "forge_type": "github",
        }
        if spec.kind == "repository":
            owner, _, name = spec.name.partition("/")
            body |= {"owner": owner, "name": name}
        else:
            body["name"] = spec.name
        garm.create_entity(spec.kind, body)


@dataclass(frozen=True)
class RebindEntity(Write):
    """Point an entity at the credential the relation now names."""

    entity: Entity
    credentials_name: str
    unlocks = _GITHUB_WRITES

    def asks(self) -> list[tuple[str, str]]:
        """The entity's create key, asking for another credential."""
        entity = self.entity
        return [(f"entity:{entity.kind}:{entity.name.lower()}", digest(self.credentials_name))]

    def line(self) -> str:
        """As the operator reads it."""
        return f"bind {self.entity.kind} {self.entity.name} to {self.credentials_name}"

    def needs(self) -> str:
        """GARM refuses a credential it does not have."""
        return self.credentials_name

    def send(self, garm: Garm, seen: None, writes: Writes) -> None:
        """Its credential."""
        garm.update_entity(self.entity, {"credentials_name": self.credentials_name})


@dataclass(frozen=True)
class DeleteEntity(Write):
    """Remove an entity nothing asks for and no scaleset lives under."""

    entity: Entity

    def asks(self) -> list[tuple[str, str]]:
        """By kind and name."""
        entity = self.entity
        return [(f"entity-delete:{entity.kind}:{entity.name.lower()}", digest(entity.id))]

    def line(self) -> str:
        """As the operator reads it."""
        return f"remove {self.entity.kind} {self.entity.name}"

    def send(self, garm: Garm, seen: None, writes: Writes) -> None:
        """Remove it."""
        garm.delete_entity(self.entity)


def _of(asked: AppCredential | EntitySpec) -> str:
    return f" for {asked.source}" if asked.source else ""


def plan_setup(
    credentials: Iterable[AppCredential],
    entities: Sequence[EntitySpec],
    published: Iterable[tuple[str, str]],
    observed_credentials: Iterable[Credential],
    observed_entities: Iterable[Entity],
    scalesets: Iterable[ScaleSet],
    *,
    complete: bool = True,
) -> list[Write]:
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
    actions: list[Write] = []
    for name, credential in sorted(wanted_credentials.items()):
        have = have_credentials.get(name)
        if have is None or have.description != credential.description:
            actions.append(PutCredential(credential, None if have is None else have.id))
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
) -> tuple[list[Write], list[Entity]]:
    """Entity creates, re-binds and deletes, and the observed entities that stay."""
    wanted = {(e.kind, e.name.lower()): e for e in entities}
    have = {(e.kind, e.name.lower()): e for e in observed_entities}
    actions: list[Write] = []
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


def read_controller(client: Garm) -> ControllerInfo | None:
    """The controller (its URLs and id), or None when GARM has no admin yet (first run is due)."""
    try:
        return client.get_controller()
    except GarmApiError as exc:
        if (exc.status, exc.error) != (409, "init_required"):
            raise
        return None


def plan_controller(have: ControllerInfo, urls: ControllerUrls) -> list[Write]:
    """The controller's URLs that differ from those asked for.

    Agent tools sync is turned off if it is on (GARM's default is off; an operator or
    another tool may have turned it on): the charm runs no garm-agent, and the sync
    downloads every new release into GARM's database. After a first run the controller
    is read again and planned again: a settled GARM costs one read here and gets no write.
    The CA bundle is compared as GARM stores it (the bytes sent); none wanted clears it.
    """
    changes: dict[str, str | bool] = {
        key: getattr(urls, key)
        for key in ("metadata_url", "callback_url", "webhook_url")
        if getattr(have, key) != getattr(urls, key)
    }
    if have.agent_tools_sync:
        changes["enable_agent_tools_sync"] = False
    if have.ca_cert_bundle != urls.ca_bundle:
        if urls.ca_bundle:
            changes["ca_cert_bundle"] = base64.b64encode(urls.ca_bundle).decode()
        else:
            changes["clear_ca_cert_bundle"] = True
    return [SetControllerUrls(changes)] if changes else []


def first_run(client: Garm, admin: AdminLogin, writes: Writes) -> ControllerInfo | None:
    """GARM's first run, through the pass's ledger; the controller as GARM then answers.

    None while the first run is held back: GARM takes no other call without an admin.
    Answered, a new GARM's id is known in the same pass (``garm.identity``).
    """
    held = len(writes.held)
    writes.run(client, [CreateAdmin(admin)], None)
    return None if len(writes.held) > held else client.get_controller()


def set_urls(client: Garm, have: ControllerInfo, urls: ControllerUrls, writes: Writes) -> bool:
    """The controller URLs, only when they differ, through the pass's ledger; GARM ready or not.

    GARM answers ``urls_required`` to every other call until the metadata and callback
    URLs are set (docs/reference/garm-api.md §1.4): while their write is held, nothing
    else is ready. A change of URLs it already has that it refuses holds nothing else.
    """
    held = len(writes.held)
    writes.run(client, plan_controller(have, urls), None)
    return len(writes.held) == held or bool(have.metadata_url and have.callback_url)
