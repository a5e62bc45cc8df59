"""GARM-shaped JSON for planner tests, built the way Go's encoder would write it.

Fields tagged ``omitempty`` in GARM are left out when they hold the zero value, so a
disabled scaleset has no ``enabled`` key and ``min_idle_runners: 0`` is absent. Planner
fixtures go through ``ScaleSet.from_json`` on these dicts rather than building models
directly, so the planner is only ever tested on shapes GARM can really send.
``test_wire_fixtures`` checks these builders against the GARM double.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

# Keys of GARM's ScaleSet that carry omitempty (docs/reference/garm-api.md §2.2).
_SCALESET_OMITEMPTY = {
    "id",
    "scale_set_id",
    "name",
    "runner_prefix",
    "extended_state",
    "provider_name",
    "image",
    "flavor",
    "os_type",
    "os_arch",
    "max_runners",
    "min_idle_runners",
    "enabled",
    "instances",
    "desired_runner_count",
    "runner_bootstrap_timeout",
    "extra_specs",
    "github-runner-group",
    "tags",
    "repo_id",
    "repo_name",
    "org_id",
    "org_name",
    "enterprise_id",
    "enterprise_name",
    "template_id",
    "template_name",
}


def go_time(value: datetime) -> str:
    """RFC 3339 as Go writes a UTC time."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scaleset_json(
    id: int,
    name: str,
    *,
    labels: tuple[str, ...] = (),
    enabled: bool = True,
    max_runners: int = 5,
    min_idle_runners: int = 0,
    scale_set_id: int | None = None,
    extended_state: str = "",
    provider_name: str = "garm-configurator-0",
    org: tuple[str, str] | None = ("org-uuid", "example-org"),
    repo: tuple[str, str] | None = None,
    image: str = "image-uuid",
    flavor: str = "m1.small",
    os_type: str = "linux",
    os_arch: str = "amd64",
    runner_group: str = "Default",
    extra_specs: Any = None,
    created_at: datetime = T0,
    updated_at: datetime = T0,
    template_id: int = 2,
) -> dict[str, Any]:
    """One scaleset as ``GET /scalesets`` lists it, zero-valued omitempty keys absent."""
    full: dict[str, Any] = {
        "runner_prefix": "garm",
        "created_at": go_time(created_at),
        "updated_at": go_time(updated_at),
        "id": id,
        "scale_set_id": 100 + id if scale_set_id is None else scale_set_id,
        "name": name,
        "disable_update": False,
        "state": "pending_create",
        "extended_state": extended_state,
        "provider_name": provider_name,
        "max_runners": max_runners,
        "min_idle_runners": min_idle_runners,
        "image": image,
        "flavor": flavor,
        "os_type": os_type,
        "os_arch": os_arch,
        "enabled": enabled,
        "enable_shell": False,
        "generation": 0,
        "endpoint": {"name": "github.com", "created_at": go_time(T0), "updated_at": go_time(T0)},
        "runner_bootstrap_timeout": 20,
        "extra_specs": extra_specs,
        "github-runner-group": runner_group,
        "tags": [{"id": f"tag-{label}", "name": label} for label in labels],
        "status_messages": None,
        "template_id": template_id,
    }
    if org is not None:
        full["org_id"], full["org_name"] = org
    if repo is not None:
        full["repo_id"], full["repo_name"] = repo
    return {
        key: value
        for key, value in full.items()
        if key not in _SCALESET_OMITEMPTY or value not in (0, "", False, None, [], {})
    }


def instance_json(
    name: str,
    scale_set_id: int,
    *,
    status: str = "running",
    runner_status: str = "idle",
    created_at: datetime = T0,
) -> dict[str, Any]:
    """One runner as ``GET /instances`` lists it (docs/reference/garm-api.md §3)."""
    data: dict[str, Any] = {
        "id": f"uuid-{name}",
        "name": name,
        "provider_name": "garm-configurator-0",
        "status": status,
        "runner_status": runner_status,
        "scale_set_id": scale_set_id,
        "created_at": go_time(created_at),
        "updated_at": go_time(created_at),
        "heartbeat": go_time(created_at),
        "capabilities": {"has_shell": False},
        "generation": 0,
    }
    return {k: v for k, v in data.items() if v not in ("", 0) or k == "generation"}


def template_json(
    id: int,
    name: str,
    *,
    description: str = "",
    owner_id: str = "admin",
    os_type: str = "linux",
    forge_type: str = "github",
    updated_at: datetime = T0,
) -> dict[str, Any]:
    """One runner install template as ``GET /templates`` lists it: ``data`` null."""
    data: dict[str, Any] = {
        "id": id,
        "created_at": go_time(T0),
        "updated_at": go_time(updated_at),
        "name": name,
        "description": description,
        "os_type": os_type,
        "forge_type": forge_type,
        "data": None,
        "owner_id": owner_id,
    }
    return {k: v for k, v in data.items() if v != "" or k in ("os_type",)}
