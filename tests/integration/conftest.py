"""Integration fixtures: a temporary Juju model, the packed charms, GARM's binaries.

Every test here needs a Juju controller, GARM's release binaries (GARM_BINARY and
GARM_PROVIDER_OPENSTACK_BINARY point at them) and a GitHub App installed on a test
organisation (GARM creates scale sets on GitHub): GARM_TEST_GITHUB_ORG,
GARM_TEST_GITHUB_APP_ID, GARM_TEST_GITHUB_INSTALLATION_ID and GARM_TEST_GITHUB_APP_KEY
(a path to its PKCS#1 key). Without them the whole directory is skipped at collection
time, before any fixture runs. No runner VM is needed: the scalesets keep no idle
runners, so a changeover completes as soon as the charm reconciles.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = (
    "GARM_BINARY",
    "GARM_PROVIDER_OPENSTACK_BINARY",
    "GARM_TEST_GITHUB_ORG",
    "GARM_TEST_GITHUB_APP_ID",
    "GARM_TEST_GITHUB_INSTALLATION_ID",
    "GARM_TEST_GITHUB_APP_KEY",
)


def _missing() -> str | None:
    if shutil.which("juju") is None:
        return "no juju client on PATH"
    probe = subprocess.run(
        ["juju", "controllers", "--format=json"], capture_output=True, text=True
    )
    if probe.returncode != 0 or '"current-controller"' not in probe.stdout:
        return "no Juju controller bootstrapped"
    for variable in REQUIRED:
        if not os.environ.get(variable):
            return f"{variable} is not set"
    if shutil.which("charmcraft") is None:
        return "no charmcraft on PATH to pack the charms"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _missing()
    if reason is None:
        return
    for item in items:
        item.add_marker(pytest.mark.skip(reason=f"integration: {reason}"))


def _pack(directory: Path) -> Path:
    subprocess.run(["charmcraft", "pack"], cwd=directory, check=True)
    return max(directory.glob("*.charm"), key=lambda p: p.stat().st_mtime)


@pytest.fixture(scope="module")
def juju() -> Iterator[object]:
    import jubilant

    with jubilant.temp_model() as juju:
        juju.wait_timeout = 20 * 60
        yield juju


@pytest.fixture(scope="module")
def garm_charm() -> Path:
    return _pack(ROOT)


@pytest.fixture(scope="module")
def stub_charm() -> Path:
    return _pack(Path(__file__).parent / "configurator_stub")
