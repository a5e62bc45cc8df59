"""Typed, frozen views of the GARM objects the charm reads, only the fields it uses.

Go's ``encoding/json`` leaves out an ``omitempty`` field holding its zero value, so an
absent key reads as the Go zero value, and the planner compares values, never key
presence (docs/reference/garm-api.md §0.1). A value of the wrong type reads as absent.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)

EntityKind = Literal["organization", "repository", "enterprise"]
# A scale set's owner: the first of these GARM names, by its ``<prefix>_id``.
_OWNERS: dict[EntityKind, str] = {
    "organization": "org",
    "repository": "repo",
    "enterprise": "enterprise",
}
# A runner GARM was told to force-remove (docs/reference/garm-api.md §3).
FORCE_REMOVED = "pending_force_delete"


def parse_time(value: object) -> datetime:
    """Go's RFC 3339 time (up to nanoseconds, cut to micro) as an aware datetime.

    What does not parse, or names no instant Python holds in UTC, is the Go zero time.
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


def decoded_text(data: object) -> str | None:
    """A template's body as sent on the wire: base64 UTF-8 text decoded, else None."""
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True).decode()
    except ValueError:  # binascii.Error, UnicodeDecodeError, a str other than ASCII
        return None


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


_READERS: dict[str, Callable[[dict[str, Any], str], Any]] = {
    "str": _str,
    "int": _int,
    "bool": lambda data, key: data.get(key) is True,
    "bytes": _bytes,
    "datetime": lambda data, key: parse_time(data.get(key)),
}


def _fields(cls: type, data: dict[str, Any], **keys: str) -> dict[str, Any]:
    """``cls``'s plain fields from GARM's JSON, by their names or the keys ``keys`` names."""
    return {
        f.name: _READERS[str(f.type)](data, keys.get(f.name, f.name))
        for f in fields(cls)
        if str(f.type) in _READERS
    }


@dataclass(frozen=True)
class ScaleSet:
    """A GARM scale set as ``GET /scalesets`` returns it (docs/reference/garm-api.md §2.2).

    ``id`` is GARM's; ``scale_set_id`` GitHub's, 0 until registered. ``extra_specs`` is
    the decoded JSON, so that equal documents compare equal however formatted.
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
        """Build from GARM's JSON."""
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
        read = _fields(cls, data, runner_group="github-runner-group")
        read |= {"entity_kind": None, "entity_id": "", "entity_name": ""}
        for kind, prefix in _OWNERS.items():
            if _str(data, f"{prefix}_id"):
                read["entity_kind"] = kind
                read["entity_id"] = _str(data, f"{prefix}_id")
                read["entity_name"] = _str(data, f"{prefix}_name")
                break
        return cls(**read, labels=labels, extra_specs=raw_specs)


@dataclass(frozen=True)
class Template:
    """A runner install template (docs/reference/garm-api.md §4).

    ``owner_id`` is a username, or ``system`` for GARM's own. ``data`` is the decoded
    body, None when not sent (GARM's list leaves bodies out).
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
        return cls(**_fields(cls, data), data=decoded_text(data.get("data")))


@dataclass(frozen=True)
class Instance:
    """A runner from ``GET /instances`` (docs/reference/garm-api.md §3).

    ``scale_set_id`` is GARM's scale set ``id`` (not GitHub's), 0 for pool runners.
    """

    name: str
    scale_set_id: int = 0
    status: str = ""
    runner_status: str = ""
    created_at: datetime = GO_ZERO_TIME
    updated_at: datetime = GO_ZERO_TIME

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Instance:
        """Build from GARM's JSON."""
        return cls(**_fields(cls, data))

    @property
    def is_idle(self) -> bool:
        """A runner that is up and waiting for a job: warm capacity."""
        return self.status == "running" and self.runner_status == "idle"


@dataclass(frozen=True)
class Entity:
    """An organization or repository registered in GARM.

    A repository's ``name`` is ``owner/name``, as scale sets name it (``repo_name``).
    ``credentials_name`` takes no part in equality: an entity of a scale set and one
    from a list compare equal.
    """

    kind: EntityKind
    id: str
    name: str
    credentials_name: str = field(default="", compare=False)

    @classmethod
    def from_json(cls, kind: EntityKind, data: dict[str, Any]) -> Entity:
        """Build from an ``Organization`` or ``Repository`` (docs/reference/garm-api.md §5.2).

        A repository's bare ``name`` becomes ``owner/name``.
        """
        read = _fields(cls, data)
        if kind == "repository":
            read["name"] = f"{_str(data, 'owner')}/{_str(data, 'name')}"
        return cls(kind=kind, **read)


@dataclass(frozen=True)
class Credential:
    """A GitHub credential as GARM lists it; GARM never returns its secret parts."""

    id: int
    name: str
    description: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Credential:
        """Build from a ``ForgeCredentials`` object (docs/reference/garm-api.md §5.3)."""
        return cls(**_fields(cls, data))


@dataclass(frozen=True)
class ControllerInfo:
    """The URLs runners and GitHub use to reach GARM, and which GARM it is.

    ``controller_id`` is made at GARM's first run and kept in its database: another means
    another database (docs/reference/garm-api.md §1.3, ``garm.identity``).
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
        return cls(**_fields(cls, data, agent_tools_sync="enable_agent_tools_sync"))
