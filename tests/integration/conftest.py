"""Integration fixtures: a temporary Juju model, the packed charms, GARM's binaries.

What the tests need is in tests/integration/README.md: a Juju client with a bootstrapped
controller, charmcraft, GARM's release binaries and a GitHub App on a test organisation,
given by the GARM_* variables of ``SETTINGS`` (``tox -e integration`` passes them on).

- None of them set: every test here is skipped, with the reason (``pytest -ra`` shows it).
- Some set but not all, or a path that is not a file, a non-numeric id: pytest exits
  before any test runs, with a message naming each problem and a non-zero code. A
  half-written configuration is a mistake; a skip would report success.
- All set: a missing juju client, controller or charmcraft is an error too, not a skip.

``pytest.exit`` rather than a failing session fixture: it stops before anything is
collected, packed or deployed, prints just the message (no traceback, no test marked
errored), and cannot be dodged by a ``-k`` that deselects the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import jubilant
import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
README = "tests/integration/README.md"

# Every variable the tests read, with what it holds (the README says the same).
SETTINGS = {
    "GARM_BINARY": "path to a GARM release's garm-linux-amd64.tgz, or the binary in it",
    "GARM_PROVIDER_OPENSTACK_BINARY": "path to a garm-provider-openstack .tgz, or its binary",
    "GARM_TEST_GITHUB_ORG": "GitHub organisation the GitHub App is installed on",
    "GARM_TEST_GITHUB_APP_ID": "the GitHub App's numeric App ID",
    "GARM_TEST_GITHUB_INSTALLATION_ID": "numeric id of its installation on that organisation",
    "GARM_TEST_GITHUB_APP_KEY": "path to the GitHub App's private key (PEM)",
}
BINARIES = ("GARM_BINARY", "GARM_PROVIDER_OPENSTACK_BINARY")
NUMBERS = ("GARM_TEST_GITHUB_APP_ID", "GARM_TEST_GITHUB_INSTALLATION_ID")
KEY = "GARM_TEST_GITHUB_APP_KEY"
ELF_MAGIC = b"\x7fELF"
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Settings:
    """The validated GARM_* settings; paths are absolute."""

    garm_binary: Path
    provider_binary: Path
    org: str
    app_id: str
    installation_id: str
    app_key: Path


def _value(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def _path_problem(name: str, value: str) -> str | None:
    path = Path(value).expanduser()
    if not path.is_file():
        return f"{name}={value}: no such file"
    if name in BINARIES:
        with path.open("rb") as file:
            head = file.read(262)
        # What the charm takes as the resource: the binary, or the release's .tgz (or tar).
        if not head.startswith((ELF_MAGIC, GZIP_MAGIC)) and head[257:262] != b"ustar":
            return (
                f"{name}={value}: neither a Linux binary nor a release archive "
                "(<name>-linux-amd64.tgz)"
            )
    elif b"PRIVATE KEY-----" not in path.read_bytes()[:65536]:
        return f"{name}={value}: not a PEM private key"
    return None


def configuration_problems(env: Mapping[str, str]) -> list[str] | None:
    """What is wrong with the GARM_* settings: None when none is set, [] when all are fine."""
    missing = [name for name in SETTINGS if not _value(env, name)]
    if len(missing) == len(SETTINGS):
        return None
    problems = [f"{name} is not set ({SETTINGS[name]})" for name in missing]
    for name in (*BINARIES, KEY):
        if (value := _value(env, name)) and (problem := _path_problem(name, value)):
            problems.append(problem)
    for name in NUMBERS:
        if (value := _value(env, name)) and not value.isdecimal():
            problems.append(f"{name}={value}: not a number ({SETTINGS[name]})")
    org = _value(env, "GARM_TEST_GITHUB_ORG")
    if "/" in org:
        problems.append(f"GARM_TEST_GITHUB_ORG={org}: an organisation name, not owner/repo")
    return problems


def tool_problems() -> list[str]:
    """What is missing of the juju client, its controller and charmcraft."""
    problems = []
    if shutil.which("juju") is None:
        problems.append("no juju client on PATH (snap install juju)")
    elif not _current_controller():
        problems.append("no Juju controller to use (juju bootstrap localhost)")
    if shutil.which("charmcraft") is None:
        problems.append("no charmcraft on PATH to pack the charms (snap install charmcraft)")
    return problems


def _current_controller() -> str | None:
    """The controller the tests would use (JUJU_CONTROLLER, else the current one)."""
    try:
        probe = subprocess.run(
            ["juju", "controllers", "--format=json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        known = json.loads(probe.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError):
        return None
    if not isinstance(known, dict):
        return None
    name = os.environ.get("JUJU_CONTROLLER") or known.get("current-controller")
    return name if name in (known.get("controllers") or {}) else None


def _settings(env: Mapping[str, str]) -> Settings:
    def path(name: str) -> Path:
        return Path(_value(env, name)).expanduser().resolve()

    return Settings(
        garm_binary=path("GARM_BINARY"),
        provider_binary=path("GARM_PROVIDER_OPENSTACK_BINARY"),
        org=_value(env, "GARM_TEST_GITHUB_ORG"),
        app_id=_value(env, "GARM_TEST_GITHUB_APP_ID"),
        installation_id=_value(env, "GARM_TEST_GITHUB_INSTALLATION_ID"),
        app_key=path(KEY),
    )


_skip_reason = pytest.StashKey[str]()
_settings_key = pytest.StashKey[Settings]()


def pytest_configure(config: pytest.Config) -> None:
    problems = configuration_problems(os.environ)
    if problems is None:
        config.stash[_skip_reason] = "; ".join(
            [f"integration: none of the GARM_* variables is set (see {README})", *tool_problems()]
        )
        return
    if problems:
        _exit(
            "the GARM_* variables are incomplete or wrong",
            problems,
            "Set all of them to run the integration tests, or none to skip them.",
        )
    if tools := tool_problems():
        _exit(
            "all GARM_* variables are set, but the integration tests cannot run",
            tools,
            "Install what is missing, or unset the GARM_* variables to skip the tests.",
        )
    config.stash[_settings_key] = _settings(os.environ)


def _exit(what: str, problems: list[str], remedy: str) -> None:
    lines = "\n  ".join(problems)
    pytest.exit(
        f"{what} (see {README}):\n  {lines}\n{remedy}",
        returncode=pytest.ExitCode.USAGE_ERROR,
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = config.stash.get(_skip_reason, None)
    if reason is None:
        return
    for item in items:
        # This hook sees the whole session's items: leave tests outside this directory be.
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def settings(pytestconfig: pytest.Config) -> Settings:
    return pytestconfig.stash[_settings_key]


def _pack(directory: Path) -> Path:
    subprocess.run(["charmcraft", "pack"], cwd=directory, check=True)
    return max(directory.glob("*.charm"), key=lambda p: p.stat().st_mtime)


@pytest.fixture(scope="module")
def juju() -> Iterator[jubilant.Juju]:
    with jubilant.temp_model() as juju:
        juju.wait_timeout = 20 * 60
        yield juju


@pytest.fixture(scope="module")
def garm_charm() -> Path:
    return _pack(ROOT)


@pytest.fixture(scope="module")
def stub_charm() -> Path:
    return _pack(HERE / "configurator_stub")
