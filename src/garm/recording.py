"""A GARM that is read for real and written to in imagination: what ``plan`` runs on.

``plan`` must tell the whole next pass, the writes earlier writes unlock included (a
retire once a create is live, the scalesets of an org registered by setup). So it runs
the very same pass through the very same loop (``garm.writes``) over this stand-in: each
write is answered as GARM would answer it from what was read and "written" before; a
runner's removal is simply accepted, as the pass folds its effect in itself.

The preview is the pass when GARM and GitHub accept every write: a create or removal
GitHub refuses is told as made, a delete it refuses (answered 200, the scale set kept:
docs/reference/garm-api.md §2.6) as done.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from datetime import datetime
from functools import cached_property
from typing import Any, TypeVar

from garm.client import GarmApiError, GarmClient
from garm.models import (
    ControllerInfo,
    Credential,
    Entity,
    Instance,
    ScaleSet,
    Template,
    decoded_text,
)

# Each field an update sends is the ``ScaleSet`` field of the same name.
_SCALESET_FIELDS = frozenset(f.name for f in dataclasses.fields(ScaleSet))
_SYSTEM_OWNER = "system"
K = TypeVar("K")
V = TypeVar("V")
_CONTROLLER_URLS = ("metadata_url", "callback_url", "webhook_url")


class Rehearsal(logging.LoggerAdapter[logging.Logger]):
    """A pass's log lines in a preview: at debug level, and marked, for nothing is done."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        """Log at debug level whatever ``level`` was asked."""
        super().log(logging.DEBUG, f"preview: {msg}", *args, **kwargs)


def told(garm: object, log: logging.Logger) -> logging.Logger | Rehearsal:
    """``log``, or over this stand-in a rehearsal's: nothing in the log may read as done."""
    return Rehearsal(log, {}) if isinstance(garm, SimulatedGarm) else log


def _existing(model: dict[K, V], key: K, method: str, path: str, what: str) -> V:
    """``model[key]``, or GARM's 404 for a write to what it does not hold."""
    if key not in model:
        raise GarmApiError(method, path, 404, "Not Found", f"{what} not found")
    return model[key]


class SimulatedGarm:
    """Reads GARM through ``client``; answers every write as GARM would, writing nothing.

    What GARM holds is read once, then changed by the simulated writes; what is made gets
    an id none read from GARM has. A base template's body is read for real. Runners are
    not held: each list reads GARM, and a removal is accepted, its effect being the pass's
    own fold (``RemoveInstance.send``).
    """

    def __init__(self, client: GarmClient, now: datetime):
        self._client, self._now = client, now
        self._controller: ControllerInfo | None = None
        self._next_scaleset = self._next_template = self._next_credential = 0
        self._next_entity = 0

    def list_scalesets(self) -> list[ScaleSet]:
        """Every scale set, as the simulated writes left them."""
        return list(self._scalesets.values())

    def list_instances(self) -> list[Instance]:
        """Every runner, read for real: a removal's effect is the pass's own (its fold)."""
        return self._client.list_instances()

    def list_providers(self) -> list[str]:
        """GARM's providers, read for real."""
        return self._client.list_providers()

    def list_organizations(self) -> list[Entity]:
        """GARM's organizations, as the simulated setup left them."""
        return [e for e in self._entities.values() if e.kind == "organization"]

    def list_repositories(self) -> list[Entity]:
        """GARM's repositories, as the simulated setup left them."""
        return [e for e in self._entities.values() if e.kind == "repository"]

    def list_credentials(self) -> list[Credential]:
        """GARM's GitHub credentials, as the simulated setup left them."""
        return list(self._credentials.values())

    def get_controller(self) -> ControllerInfo:
        """The controller's URLs, as the simulated setup left them."""
        if self._controller is None:
            self._controller = self._client.get_controller()
        return self._controller

    def list_templates(self) -> list[Template]:
        """Every template without its body, as GARM lists them."""
        return [dataclasses.replace(t, data=None) for t in self._templates.values()]

    def get_template(self, template_id: int) -> Template:
        """One template with its body: read from GARM, unless simulated writes made it."""
        path = f"/templates/{template_id}"
        have = _existing(self._templates, template_id, "GET", path, "template")
        return have if have.data is not None else self._client.get_template(template_id)

    def get_scaleset(self, scaleset_id: int) -> ScaleSet | None:
        """One scale set, None once deleted: the read confirming a delete says gone."""
        return self._scalesets.get(scaleset_id)

    def create_scaleset(self, entity: Entity, body: dict[str, Any]) -> ScaleSet:
        """The scale set GARM would create: enabled as sent, registered, made now."""
        scaleset_id = self._next_scaleset
        self._next_scaleset += 1
        # Created without a template, a scale set gets GARM's system one for its OS.
        template_id = body.get("template_id") or next(
            (
                t.id
                for t in self._templates.values()
                if t.owner_id == _SYSTEM_OWNER and t.os_type == body.get("os_type", "")
            ),
            0,
        )
        created = ScaleSet(
            id=scaleset_id,
            name=body["name"],
            scale_set_id=scaleset_id,
            enabled=bool(body.get("enabled")),
            provider_name=body.get("provider_name", ""),
            image=body.get("image", ""),
            flavor=body.get("flavor", ""),
            os_type=body.get("os_type", ""),
            os_arch=body.get("os_arch", ""),
            max_runners=body.get("max_runners", 0),
            min_idle_runners=body.get("min_idle_runners", 0),
            runner_group=body.get("github-runner-group", "") or "Default",
            labels=tuple(body.get("labels", ())),
            extra_specs=body.get("extra_specs") or None,
            entity_kind=entity.kind,
            entity_id=entity.id,
            entity_name=entity.name,
            created_at=self._now,
            template_id=template_id,
        )
        self._scalesets[scaleset_id] = created
        return created

    def update_scaleset(self, scaleset_id: int, changes: dict[str, Any]) -> ScaleSet:
        """The scale set with the changed fields, as GARM would answer the PUT."""
        have = _existing(
            self._scalesets, scaleset_id, "PUT", f"/scalesets/{scaleset_id}", "scaleset"
        )
        fields = {k: v for k, v in changes.items() if k in _SCALESET_FIELDS}
        self._scalesets[scaleset_id] = dataclasses.replace(have, **fields)
        return self._scalesets[scaleset_id]

    def delete_scaleset(self, scaleset_id: int) -> None:
        """Gone, as if GitHub let go (GARM may keep it; the preview cannot know)."""
        self._scalesets.pop(scaleset_id, None)

    def delete_instance(self, name: str, *, force: bool = False) -> None:
        """Accepted: the pass notes the runner on its way out (``RemoveInstance``)."""

    def create_template(self, body: dict[str, Any]) -> Template:
        """The template GARM would create, with its description and body."""
        template_id = self._next_template
        self._next_template += 1
        made = Template(
            id=template_id,
            name=body.get("name", ""),
            description=body.get("description", ""),
            os_type=body.get("os_type", ""),
            forge_type=body.get("forge_type", ""),
            updated_at=self._now,
            data=decoded_text(body.get("data")),
        )
        self._templates[template_id] = made
        return made

    def update_template(self, template_id: int, changes: dict[str, Any]) -> Template:
        """The template with its new description and body."""
        have = _existing(
            self._templates, template_id, "PUT", f"/templates/{template_id}", "template"
        )
        named = {k: changes[k] for k in ("name", "description") if k in changes}
        fields: dict[str, Any] = {"updated_at": self._now, **named}
        if changes.get("data"):
            fields["data"] = decoded_text(changes["data"])
        written = dataclasses.replace(have, **fields)
        self._templates[template_id] = written
        return written

    def delete_template(self, template_id: int) -> None:
        """Gone: GARM deletes a template no scale set uses."""
        self._templates.pop(template_id, None)

    def first_run(self, username: str, email: str, password: str) -> bool:
        """An admin made, and a controller without URLs (GARM's reads would still refuse)."""
        self._controller = ControllerInfo()
        return True

    def update_controller(self, changes: dict[str, Any]) -> ControllerInfo:
        """The controller with the URLs and the CA bundle sent."""
        sent: dict[str, Any] = {k: v for k, v in changes.items() if k in _CONTROLLER_URLS}
        if "ca_cert_bundle" in changes:
            sent["ca_cert_bundle"] = base64.b64decode(changes["ca_cert_bundle"])
        if changes.get("clear_ca_cert_bundle"):
            sent["ca_cert_bundle"] = b""
        self._controller = dataclasses.replace(self.get_controller(), **sent)
        return self._controller

    def create_credential(self, body: dict[str, Any]) -> Credential:
        """The credential GARM would create (its secret parts are never read back)."""
        made = Credential(self._next_credential, body["name"], body.get("description", ""))
        self._credentials[made.id] = made
        self._next_credential += 1
        return made

    def update_credential(self, credential_id: int, body: dict[str, Any]) -> Credential:
        """The credential with its new description (and key, unseen)."""
        path = f"/github/credentials/{credential_id}"
        have = _existing(self._credentials, credential_id, "PUT", path, "credential")
        written = dataclasses.replace(have, description=body.get("description", have.description))
        self._credentials[credential_id] = written
        return written

    def delete_credential(self, credential_id: int) -> None:
        """Gone."""
        self._credentials.pop(credential_id, None)

    def create_entity(self, kind: str, body: dict[str, Any]) -> Entity:
        """The organization or repository GARM would register, under a new id."""
        repository = kind == "repository"
        name = f"{body['owner']}/{body['name']}" if repository else body["name"]
        made = Entity(
            "repository" if repository else "organization",
            f"preview-{self._next_entity}",
            name,
            body["credentials_name"],
        )
        self._next_entity += 1
        self._entities[(made.kind, made.id)] = made
        return made

    def update_entity(self, entity: Entity, body: dict[str, Any]) -> None:
        """The entity bound to the credential sent."""
        key = (entity.kind, entity.id)
        have = _existing(self._entities, key, "PUT", f"/{entity.kind}s/{entity.id}", entity.kind)
        credentials = body.get("credentials_name", have.credentials_name)
        self._entities[key] = dataclasses.replace(have, credentials_name=credentials)

    def delete_entity(self, entity: Entity) -> None:
        """Gone (GARM refuses while scale sets live under it; the planner waits for that)."""
        self._entities.pop((entity.kind, entity.id), None)

    @cached_property
    def _credentials(self) -> dict[int, Credential]:
        read = {c.id: c for c in self._client.list_credentials()}
        self._next_credential = max(read, default=0) + 1
        return read

    @cached_property
    def _entities(self) -> dict[tuple[str, str], Entity]:
        listed = (*self._client.list_organizations(), *self._client.list_repositories())
        return {(e.kind, e.id): e for e in listed}

    @cached_property
    def _scalesets(self) -> dict[int, ScaleSet]:
        read = {s.id: s for s in self._client.list_scalesets()}
        self._next_scaleset = max(read, default=0) + 1
        return read

    @cached_property
    def _templates(self) -> dict[int, Template]:
        read = {t.id: t for t in self._client.list_templates()}
        self._next_template = max(read, default=0) + 1
        return read


# What a pass asks of GARM: GARM itself, or this stand-in for it.
Garm = GarmClient | SimulatedGarm
