"""Fixtures for driving the real charm: a sandboxed machine, resources, a seeded GARM."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest
from charmlibs import passwd
from ops import testing

import workload
from charm import GarmCharm
from tests.garm_double import GarmDouble
from tests.machine import FakeSystemctl, Machine


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Machine:
    """This unit's machine: files under a temporary root, its commands answered by fakes."""
    paths = workload.Paths(tmp_path / "machine")
    monkeypatch.setattr(GarmCharm, "paths", paths)
    monkeypatch.setattr(GarmCharm, "service_user", pwd.getpwuid(os.getuid()).pw_name)
    users: list[str] = []
    monkeypatch.setattr(passwd, "add_user", lambda name, **_: users.append(name))
    systemctl = FakeSystemctl()
    monkeypatch.setattr(subprocess, "run", systemctl)
    return Machine(paths, systemctl, users)


@pytest.fixture
def ctx() -> testing.Context:
    return testing.Context(GarmCharm)


@pytest.fixture
def resources(tmp_path: Path) -> frozenset[testing.Resource]:
    out = []
    for name in ("garm", "garm-provider-openstack"):
        path = tmp_path / name
        path.write_bytes(b"\x7fELF binary")
        out.append(testing.Resource(name=name, path=path))
    return frozenset(out)


@pytest.fixture
def world(garm: GarmDouble):
    garm.add_provider("garm-configurator-0")
    garm.add_provider("garm-configurator-1")
    garm.add_org("example-org")
    return garm
