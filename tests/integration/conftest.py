"""Integration fixtures: a temporary Juju model, the packed charms, GARM's binaries.

What the tests need is in tests/integration/README.md: a Juju client with a bootstrapped
controller, charmcraft, GARM's release binaries and a GitHub App on a test organisation,
given by the GARM_* variables of ``SETTINGS`` (``tox -e integration`` passes them on).

- None of them set: every test here is skipped, with the reason (``pytest -ra`` shows it).
- Some set but not all, or a path that is not a file, a non-numeric id: pytest exits
  before any test runs, with a message naming each problem and a non-zero code. A
  half-written configuration is a mistake; a skip would report success.
- All set: a missing juju client, controller or charmcraft is an error too, not a skip.

``test_job_survives_changeover.py`` needs more on top: an OpenStack project the provider
starts runners in, and a repository of the organisation with a workflow to dispatch
(``CHANGEOVER_SETTINGS``). The same rule holds for them: none set skips that test alone
(any test asking for the ``changeover`` fixture), some set or any set without the
suite's own fails the run at once, naming each.

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
from dataclasses import dataclass, field
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
# The job-survives-changeover test's own, on top of SETTINGS (the README says the same).
CHANGEOVER_SETTINGS = {
    "GARM_TEST_OPENSTACK_AUTH_URL": "Keystone URL of the cloud runners start in (http(s)://.../v3)",
    "GARM_TEST_OPENSTACK_USERNAME": "OpenStack user the provider logs in as",
    "GARM_TEST_OPENSTACK_PASSWORD": "that user's password",
    "GARM_TEST_OPENSTACK_PROJECT_NAME": "OpenStack project the runner VMs go in",
    "GARM_TEST_OPENSTACK_USER_DOMAIN_NAME": "the user's domain, e.g. Default",
    "GARM_TEST_OPENSTACK_PROJECT_DOMAIN_NAME": "the project's domain, e.g. Default",
    "GARM_TEST_OPENSTACK_REGION_NAME": "OpenStack region, e.g. RegionOne",
    "GARM_TEST_OPENSTACK_NETWORK": "network the runner VMs are attached to",
    "GARM_TEST_OPENSTACK_IMAGE_ID": "id of a runner image in that project (Ubuntu, amd64)",
    "GARM_TEST_OPENSTACK_FLAVOR": "flavor of the runner VMs",
    "GARM_TEST_GITHUB_REPO": "repository of GARM_TEST_GITHUB_ORG holding the workflow (name only)",
    "GARM_TEST_GITHUB_TOKEN": "token that may dispatch that repository's workflows and read runs",
}
# Values never echoed in a message.
SECRET_SETTINGS = frozenset({"GARM_TEST_OPENSTACK_PASSWORD", "GARM_TEST_GITHUB_TOKEN"})
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


@dataclass(frozen=True)
class ChangeoverSettings:
    """The validated CHANGEOVER_SETTINGS. ``repr`` hides the two secrets."""

    openstack_auth_url: str
    openstack_username: str
    openstack_password: str = field(repr=False)
    openstack_project_name: str
    openstack_user_domain_name: str
    openstack_project_domain_name: str
    openstack_region_name: str
    openstack_network: str
    image_id: str
    flavor: str
    repo: str
    token: str = field(repr=False)


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


def changeover_problems(env: Mapping[str, str]) -> list[str] | None:
    """What is wrong with CHANGEOVER_SETTINGS: None when none is set, [] when all are fine.

    Checked alone; whether the suite's own are set too is the caller's question.
    """
    missing = [name for name in CHANGEOVER_SETTINGS if not _value(env, name)]
    if len(missing) == len(CHANGEOVER_SETTINGS):
        return None
    problems = [f"{name} is not set ({CHANGEOVER_SETTINGS[name]})" for name in missing]
    url = _value(env, "GARM_TEST_OPENSTACK_AUTH_URL")
    if url and not url.startswith(("http://", "https://")):
        problems.append(f"GARM_TEST_OPENSTACK_AUTH_URL={url}: not an http:// or https:// URL")
    repo = _value(env, "GARM_TEST_GITHUB_REPO")
    if "/" in repo:
        problems.append(
            f"GARM_TEST_GITHUB_REPO={repo}: the repository's name alone; "
            "its owner is GARM_TEST_GITHUB_ORG"
        )
    for name in SECRET_SETTINGS:
        if any(c.isspace() for c in _value(env, name)):
            problems.append(f"{name}: contains white space (value not shown)")
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


def _changeover_settings(env: Mapping[str, str]) -> ChangeoverSettings:
    def value(name: str) -> str:
        return _value(env, f"GARM_TEST_{name}")

    return ChangeoverSettings(
        openstack_auth_url=value("OPENSTACK_AUTH_URL"),
        openstack_username=value("OPENSTACK_USERNAME"),
        openstack_password=value("OPENSTACK_PASSWORD"),
        openstack_project_name=value("OPENSTACK_PROJECT_NAME"),
        openstack_user_domain_name=value("OPENSTACK_USER_DOMAIN_NAME"),
        openstack_project_domain_name=value("OPENSTACK_PROJECT_DOMAIN_NAME"),
        openstack_region_name=value("OPENSTACK_REGION_NAME"),
        openstack_network=value("OPENSTACK_NETWORK"),
        image_id=value("OPENSTACK_IMAGE_ID"),
        flavor=value("OPENSTACK_FLAVOR"),
        repo=value("GITHUB_REPO"),
        token=value("GITHUB_TOKEN"),
    )


_skip_reason = pytest.StashKey[str]()
_settings_key = pytest.StashKey[Settings]()
_changeover_skip = pytest.StashKey[str]()
_changeover_key = pytest.StashKey[ChangeoverSettings]()


def pytest_configure(config: pytest.Config) -> None:
    problems = configuration_problems(os.environ)
    extra = changeover_problems(os.environ)
    if extra is not None and (problems is None or extra):
        suite = [] if problems is not None else [f"{name} is not set" for name in SETTINGS]
        _exit(
            "the changeover test's variables are incomplete or wrong",
            [*suite, *extra],
            "Set all of them (and the suite's GARM_* variables) to run the test "
            "that a job survives a changeover, or none of them to skip it.",
        )
    if extra is None:
        config.stash[_changeover_skip] = (
            "changeover: none of the GARM_TEST_OPENSTACK_*, GARM_TEST_GITHUB_REPO, "
            f"GARM_TEST_GITHUB_TOKEN variables is set (see {README})"
        )
    else:
        config.stash[_changeover_key] = _changeover_settings(os.environ)
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
    changeover = config.stash.get(_changeover_skip, None)
    for item in items:
        # This hook sees the whole session's items: leave tests outside this directory be.
        if not item.path.is_relative_to(HERE):
            continue
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif changeover is not None and "changeover" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=changeover))


@pytest.fixture(scope="session")
def settings(pytestconfig: pytest.Config) -> Settings:
    return pytestconfig.stash[_settings_key]


@pytest.fixture(scope="session")
def changeover(pytestconfig: pytest.Config) -> ChangeoverSettings:
    """The changeover test's settings; a test asking for them is skipped when none is set."""
    return pytestconfig.stash[_changeover_key]


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
