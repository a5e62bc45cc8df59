"""The planner's hand-built GARM JSON (tests/wire.py) has exactly the double's shape.

If a fixture carried a key GARM leaves out (``enabled: false``, ``max_runners: 0``), the
planner tests would pass on a shape GARM never sends — the bug class the reference
review found. So the fixtures are compared, key for key, with what the double lists.
"""

from __future__ import annotations

import requests

from tests.garm_double import GarmDouble
from tests.wire import instance_json, scaleset_json


def _call(garm: GarmDouble, method: str, path: str, body: dict | None = None):
    """One raw API call as the admin, answering the decoded JSON body."""
    login = requests.post(
        f"{garm.url}/api/v1/auth/login",
        json={"username": garm.username, "password": garm.password},
        timeout=5,
    )
    answer = requests.request(
        method,
        f"{garm.url}/api/v1{path}",
        json=body,
        headers={"Authorization": f"Bearer {login.json()['token']}"},
        timeout=5,
    )
    answer.raise_for_status()
    return answer.json()


def _create(garm: GarmDouble, org_id: str, **extra) -> dict:
    body = {
        "name": "ci-08f883",
        "provider_name": "garm-configurator-0",
        "max_runners": 5,
        "image": "image-uuid",
        "flavor": "m1.small",
        "os_type": "linux",
        "os_arch": "amd64",
        "enabled": True,
        "labels": ["ci", "linux"],
        "github-runner-group": "Default",
        **extra,
    }
    return _call(garm, "POST", f"/organizations/{org_id}/scalesets", body)


def test_an_enabled_scaleset_fixture_has_the_listed_keys(garm: GarmDouble):
    org_id = garm.add_org("example-org")
    _create(garm, org_id, min_idle_runners=1, extra_specs={"a": 1})
    (listed,) = _call(garm, "GET", "/scalesets")
    fixture = scaleset_json(
        listed["id"],
        listed["name"],
        labels=("ci", "linux"),
        min_idle_runners=1,
        org=(org_id, "example-org"),
        extra_specs={"a": 1},
        scale_set_id=listed["scale_set_id"],
    )
    assert set(fixture) == set(listed)


def test_a_retired_scaleset_fixture_leaves_out_the_same_keys(garm: GarmDouble):
    org_id = garm.add_org("example-org")
    created = _create(garm, org_id)
    changes = {
        "enabled": False,
        "max_runners": 0,
        "min_idle_runners": 0,
        "extended_state": "retired-at=2026-11-01T12:00:00Z",
    }
    _call(garm, "PUT", f"/scalesets/{created['id']}", changes)
    (listed,) = _call(garm, "GET", "/scalesets")
    fixture = scaleset_json(
        listed["id"],
        listed["name"],
        labels=("ci", "linux"),
        enabled=False,
        max_runners=0,
        extended_state="retired-at=2026-11-01T12:00:00Z",
        org=(org_id, "example-org"),
        scale_set_id=listed["scale_set_id"],
    )
    assert set(fixture) == set(listed)
    assert "enabled" not in listed


def test_an_instance_fixture_has_the_listed_keys(garm: GarmDouble):
    org_id = garm.add_org("example-org")
    created = _create(garm, org_id)
    garm.add_runner(created["id"], runner_status="active")
    (listed,) = _call(garm, "GET", "/instances")
    fixture = instance_json(listed["name"], created["id"], runner_status="active")
    assert set(fixture) - set(listed) == set()
