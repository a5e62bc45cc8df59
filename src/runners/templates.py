"""The charm's runner install templates in GARM: which exist, which are current, which go.

A logical scaleset whose runners need setting up gets a template of its own, GARM's system
``github_linux`` with the charm's blocks added (``scripts``). Its description carries a
digest of the base's id and last change and of the blocks, so a settled pass reads GARM's
template list and no body (ADR 0004). Templates the charm did not make are never written.
Its writes are ``garm.writes.Write`` values, each body derived from the base at write time.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from garm import refusals
from garm.models import Template, format_time
from garm.writes import UnmadeError, Write, Writes
from runners.scripts import TemplateError, derive_template

BASE_NAME = "github_linux"
SYSTEM_OWNER = "system"
PREFIX = "garm-charm-"
MARKER = "Managed by the garm charm"
# Bumped when the way blocks are put into the base changes, so every template follows.
SPLICE_VERSION = "1"
_DIGEST = "digest "


def template_name(logical_name: str) -> str:
    """The template of one logical scaleset; lower-cased, as logical names compare."""
    return PREFIX + logical_name.lower()


def description(logical_name: str, digest: str) -> str:
    """What the template says about itself: who keeps it, for what, and its digest."""
    return f"{MARKER} for scaleset {logical_name}; edits are overwritten. {_DIGEST}{digest}"


def digest(base: Template, blocks: str) -> str:
    """What a template derived from ``base`` with ``blocks`` holds, in 16 hex digits.

    The base enters by id and ``updated_at``, which an edit or a restore changes.
    """
    text = f"{SPLICE_VERSION}\n{base.id}\n{format_time(base.updated_at)}\n{blocks}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _TemplateWrite(Write):
    """A template of the charm's written whole: its description and the base with ``blocks``."""

    logical_name: str
    name: str
    description: str
    base_id: int
    blocks: str

    def asks(self) -> list[tuple[str, str]]:
        """By name (an update shares its create's key), asking for what its description says."""
        return [(f"template:{self.name}", refusals.digest(self.description))]


@dataclass(frozen=True)
class CreateTemplate(_TemplateWrite):
    """Create a logical scaleset's template from the base and the charm's blocks."""

    def line(self) -> str:
        """As the operator reads it."""
        return f"create runner template {self.name} for {self.logical_name}"

    def send(self, garm: Any, seen: Any, writes: Writes) -> Any:
        """Create it, its body derived now from the base as GARM holds it."""
        body = {
            "name": self.name,
            "description": self.description,
            "data": _derived(garm, self.base_id, self.blocks, writes),
            "os_type": "linux",
            "forge_type": "github",
        }
        return _written(seen, self.name, garm.create_template(body))


@dataclass(frozen=True)
class UpdateTemplate(_TemplateWrite):
    """Rewrite a template of the charm's in place: new runners get it, running ones not."""

    template_id: int

    def line(self) -> str:
        """As the operator reads it."""
        return f"update runner template {self.name} for {self.logical_name}"

    def send(self, garm: Any, seen: Any, writes: Writes) -> Any:
        """Its description and body, derived now from the base as GARM holds it."""
        data = _derived(garm, self.base_id, self.blocks, writes)
        changes = {"description": self.description, "data": data}
        return _written(seen, self.name, garm.update_template(self.template_id, changes))


@dataclass(frozen=True)
class DeleteTemplate(Write):
    """Delete a template of the charm's that no scaleset uses or asks for any more."""

    template_id: int
    name: str

    def asks(self) -> list[tuple[str, str]]:
        """By name."""
        return [(f"template-delete:{self.name}", "")]

    def line(self) -> str:
        """As the operator reads it."""
        return f"delete runner template {self.name}"

    def send(self, garm: Any, seen: Any, writes: Writes) -> Any:
        """Delete it."""
        garm.delete_template(self.template_id)
        return replace(seen, templates=tuple(t for t in seen.templates if t.name != self.name))


def _derived(garm: Any, base_id: int, blocks: str, writes: Writes) -> str:
    """A template's body, base64: the base's, read once a pass, with the blocks added.

    GARM lists templates without bodies, so the base is read only when a template of the
    charm's must be written, never on a settled pass.
    """
    try:
        base = writes.read(("template", base_id), lambda: garm.get_template(base_id).data)
        if not base:
            raise TemplateError(f"GARM sent template {base_id} without its body")
        return base64.b64encode(derive_template(base, blocks).encode()).decode()
    except TemplateError as exc:
        raise UnmadeError(str(exc)) from exc


def _written(seen: Any, name: str, written: Template) -> Any:
    """The pass's observation with a template as GARM answered it, listed without its body.

    ``seen`` is ``scalesets.actions.Observed``, a layer above this one: only its
    ``templates`` are read here.
    """
    others = tuple(t for t in seen.templates if t.name != name)
    return replace(seen, templates=(*others, replace(written, data=None)))


TemplateAction = CreateTemplate | UpdateTemplate | DeleteTemplate


@dataclass(frozen=True)
class Choice:
    """The template a logical scaleset's generations should use, and how to get there.

    ``template_id`` 0 is GARM's default. ``ready``: a new generation may use it now.
    ``action``: the template write needed first; ``problem``: why none can be made.
    ``keep``: whatever template a live generation has stays.
    """

    template_id: int = 0
    ready: bool = True
    action: TemplateAction | None = None
    problem: str = ""
    keep: bool = False


class Templates:
    """GARM's templates, indexed once per plan so each scaleset's choice is constant time."""

    def __init__(self, templates: Iterable[Template]):
        self.base: Template | None = None
        self._by_name: dict[str, Template] = {}
        self._foreign: set[str] = set()
        self.ours: dict[int, Template] = {}
        for template in templates:
            if (
                template.owner_id == SYSTEM_OWNER
                and template.name == BASE_NAME
                and template.os_type == "linux"
                and template.forge_type in ("github", "")
            ):
                self.base = template
            elif (
                # Made by the charm: its name and description say so, and GARM did not make it.
                template.owner_id != SYSTEM_OWNER
                and template.name.startswith(PREFIX)
                and template.description.startswith(MARKER)
            ):
                self.ours[template.id] = template
                self._by_name.setdefault(template.name, template)
            else:
                self._foreign.add(template.name)

    def choose(self, logical_name: str, blocks: str, *, hold: bool = False) -> Choice:
        """The template for a logical scaleset whose runners need ``blocks`` added.

        ``hold`` (debug-ssh data unusable) writes none and changes no generation's: one
        that needs a template not made yet waits, as its runners may not start without.
        """
        name = template_name(logical_name)
        mine = self._by_name.get(name)
        if hold:
            if mine is not None:
                return Choice(mine.id, keep=True)
            return Choice(ready=not blocks, keep=True)
        if not blocks:
            return Choice()
        if mine is None and name in self._foreign:
            return Choice(
                ready=False,
                problem=f"runner template {name} exists and the charm did not make it: "
                "rename or delete it in GARM",
            )
        if self.base is None:
            # Without a base nothing can be made or checked; one made before serves on.
            if mine is not None:
                return Choice(mine.id)
            return Choice(
                ready=False,
                problem=f"GARM has no system {BASE_NAME} template to build runner templates "
                "from: restore it with garm-cli template restore",
            )
        wanted = digest(self.base, blocks)
        text = description(logical_name, wanted)
        if mine is None:
            create = CreateTemplate(logical_name, name, text, self.base.id, blocks)
            return Choice(ready=False, action=create)
        if mine.description.rpartition(_DIGEST)[2] != wanted:
            update = UpdateTemplate(logical_name, name, text, self.base.id, blocks, mine.id)
            return Choice(mine.id, ready=False, action=update)
        return Choice(mine.id)
