"""Typed, frozen views of the GARM objects the reconciler reads.

GARM encodes with Go's ``encoding/json``: a field tagged ``omitempty`` is *absent* when it
holds its zero value (``enabled: false``, ``max_runners: 0``, ``""``, empty lists). Every
``from_json`` here therefore gives an absent key the Go zero value, so the planner compares
values and never key presence (docs/reference/garm-api.md §0.1). Only the fields the
charm uses are kept.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)

EntityKind = Literal["organization", "repository", "enterprise"]
# The status GARM sets on a runner it was told to force-remove (docs/reference/garm-api.md §3): the
# row goes once GARM's worker gets to it, whatever its provider answers.
FORCE_REMOVED = "pending_force_delete"


def parse_time(value: object) -> datetime:
    """Parse Go's RFC 3339 time (``Z``, up to nanoseconds) into an aware datetime.

    Go emits up to nine fractional digits, more than ``datetime`` holds, so the fraction
    is cut to microseconds here. An unparsable or missing value is the Go zero time, and
    so is one that names no instant Python can hold in UTC; nothing here raises.
    """
    if not isinstance(value, str):
        return GO_ZERO_TIME
    match = _RFC3339.match(value)
    if match is None:
        return GO_ZERO_TIME
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        if zone in ("Z", "z"):
            tz = UTC
        else:
            sign = 1 if zone[0] == "+" else -1
            tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        parsed = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tz
        )
        # A time at the calendar's edge with an offset has no UTC form: OverflowError.
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # an offset of 24 h or more, a 13th month ...
        return GO_ZERO_TIME


def format_time(value: datetime) -> str:
    """Format an aware datetime as RFC 3339 in UTC, second precision, with ``Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _str(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _bytes(data: dict[str, Any], key: str) -> bytes:
    """A Go ``[]byte`` field: base64 text on the wire; empty when absent or not base64."""
    try:
        return base64.b64decode(_str(data, key), validate=True)
    except ValueError:
        return b""


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _bool(data: dict[str, Any], key: str) -> bool:
    return data.get(key) is True


@dataclass(frozen=True)
class ScaleSet:
    """A GARM scale set as ``GET /scalesets`` returns it (docs/reference/garm-api.md §2.2).

    ``id`` is GARM's own integer id; ``scale_set_id`` is GitHub's, 0 until registered.
    ``extra_specs`` is held as the decoded JSON value so that equal documents compare
    equal however GARM formatted them.
    """

    id: int
    name: str
    scale_set_id: int = 0
    enabled: bool = False
    state: str = ""
    extended_state: str = ""
    provider_name: str = ""
    image: str = ""
    flavor: str = ""
    os_type: str = ""
    os_arch: str = ""
    max_runners: int = 0
    min_idle_runners: int = 0
    runner_group: str = ""
    labels: tuple[str, ...] = ()
    extra_specs: Any = None
    entity_kind: EntityKind | None = None
    entity_id: str = ""
    entity_name: str = ""
    created_at: datetime = GO_ZERO_TIME
    template_id: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScaleSet:
        """Build from GARM's JSON, absent keys taking Go zero values."""
        raw_specs = data.get("extra_specs")
        if isinstance(raw_specs, str):
            # A client may hand us the RawMessage still encoded; decode it the same way.
            with contextlib.suppress(ValueError, RecursionError):
                raw_specs = json.loads(raw_specs)
        tags = data.get("tags")
        labels = tuple(
            tag["name"]
            for tag in (tags if isinstance(tags, list) else [])
            if isinstance(tag, dict) and isinstance(tag.get("name"), str)
        )
        kind: EntityKind | None = None
        entity_id = entity_name = ""
        for candidate, prefix in (
            ("organization", "org"),
            ("repository", "repo"),
            ("enterprise", "enterprise"),
        ):
            if _str(data, f"{prefix}_id"):
                kind = candidate  # type: ignore[assignment]
                entity_id = _str(data, f"{prefix}_id")
                entity_name = _str(data, f"{prefix}_name")
                break
        return cls(
            id=_int(data, "id"),
            name=_str(data, "name"),
            scale_set_id=_int(data, "scale_set_id"),
            enabled=_bool(data, "enabled"),
            state=_str(data, "state"),
            extended_state=_str(data, "extended_state"),
            provider_name=_str(data, "provider_name"),
            image=_str(data, "image"),
            flavor=_str(data, "flavor"),
            os_type=_str(data, "os_type"),
            os_arch=_str(data, "os_arch"),
            max_runners=_int(data, "max_runners"),
            min_idle_runners=_int(data, "min_idle_runners"),
            runner_group=_str(data, "github-runner-group"),
            labels=labels,
            extra_specs=raw_specs,
            entity_kind=kind,
            entity_id=entity_id,
            entity_name=entity_name,
            created_at=parse_time(data.get("created_at")),
            template_id=_int(data, "template_id"),
        )


@dataclass(frozen=True)
class Template:
    """A runner install template (docs/reference/garm-api.md §4).

    ``owner_id`` is a username, or ``system`` for GARM's built-in templates. ``data`` is
    the decoded body, None when GARM did not send it: its list leaves every body out.
    """

    id: int
    name: str
    description: str = ""
    os_type: str = ""
    forge_type: str = ""
    owner_id: str = ""
    updated_at: datetime = GO_ZERO_TIME
    data: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Template:
        """Build from GARM's JSON; a body that is not base64 UTF-8 text reads as absent."""
        body = None
        raw = data.get("data")
        if isinstance(raw, str):
            # ValueError: binascii.Error, and a str with other than ASCII in it.
            with contextlib.suppress(ValueError):
                body = base64.b64decode(raw, validate=True).decode()
        return cls(
            id=_int(data, "id"),
            name=_str(data, "name"),
            description=_str(data, "description"),
            os_type=_str(data, "os_type"),
            forge_type=_str(data, "forge_type"),
            owner_id=_str(data, "owner_id"),
            updated_at=parse_time(data.get("updated_at")),
            data=body,
        )


@dataclass(frozen=True)
class Instance:
    """A runner instance from ``GET /instances`` (docs/reference/garm-api.md §3).

    ``scale_set_id`` here is the GARM scale set ``id`` (not GitHub's), 0 for pool runners.
    """

    name: str
    scale_set_id: int = 0
    status: str = ""
    runner_status: str = ""
    created_at: datetime = GO_ZERO_TIME
    updated_at: datetime = GO_ZERO_TIME

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Instance:
        """Build from GARM's JSON, absent keys taking Go zero values."""
        return cls(
            name=_str(data, "name"),
            scale_set_id=_int(data, "scale_set_id"),
            status=_str(data, "status"),
            runner_status=_str(data, "runner_status"),
            created_at=parse_time(data.get("created_at")),
            updated_at=parse_time(data.get("updated_at")),
        )

    @property
    def is_idle(self) -> bool:
        """A runner that is up and waiting for a job: warm capacity."""
        return self.status == "running" and self.runner_status == "idle"


@dataclass(frozen=True)
class Entity:
    """An organization or repository registered in GARM.

    ``name`` is the organization name, or ``owner/name`` for a repository, which is how
    scale sets name their repository (``repo_name``). ``credentials_name`` is the GitHub
    credential GARM talks to GitHub with for it; it does not take part in equality, so
    an entity found in a scale set and one from a list compare equal.
    """

    kind: EntityKind
    id: str
    name: str
    credentials_name: str = field(default="", compare=False)

    @classmethod
    def organization_from_json(cls, data: dict[str, Any]) -> Entity:
        """Build from an ``Organization`` object (docs/reference/garm-api.md §5.2)."""
        return cls(
            kind="organization",
            id=_str(data, "id"),
            name=_str(data, "name"),
            credentials_name=_str(data, "credentials_name"),
        )

    @classmethod
    def repository_from_json(cls, data: dict[str, Any]) -> Entity:
        """Build from a ``Repository`` object; its ``name`` is the bare repository name."""
        return cls(
            kind="repository",
            id=_str(data, "id"),
            name=f"{_str(data, 'owner')}/{_str(data, 'name')}",
            credentials_name=_str(data, "credentials_name"),
        )


@dataclass(frozen=True)
class Credential:
    """A GitHub credential as GARM lists it; GARM never returns its secret parts."""

    id: int
    name: str
    description: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Credential:
        """Build from a ``ForgeCredentials`` object (docs/reference/garm-api.md §5.3)."""
        return cls(
            id=_int(data, "id"), name=_str(data, "name"), description=_str(data, "description")
        )


@dataclass(frozen=True)
class ControllerInfo:
    """The URLs runners and GitHub use to reach GARM, and which GARM it is.

    ``controller_id`` is made at GARM's first run and kept in its database: another one
    answering means another database (docs/reference/garm-api.md §1.3, ``garm.identity``).
    """

    metadata_url: str = ""
    callback_url: str = ""
    webhook_url: str = ""
    # Whether GARM downloads garm-agent releases into its object store (hourly), for
    # entities in agent mode: the charm uses no agent, so it keeps this off.
    agent_tools_sync: bool = False
    controller_id: str = ""
    # The CA bundle GARM hands runners (Go []byte: base64 on the wire), as it stored it.
    ca_cert_bundle: bytes = b""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ControllerInfo:
        """Build from ``ControllerInfo``; unset URLs are absent on the wire."""
        return cls(
            metadata_url=_str(data, "metadata_url"),
            callback_url=_str(data, "callback_url"),
            webhook_url=_str(data, "webhook_url"),
            agent_tools_sync=data.get("enable_agent_tools_sync") is True,
            controller_id=_str(data, "controller_id"),
            ca_cert_bundle=_bytes(data, "ca_cert_bundle"),
        )
