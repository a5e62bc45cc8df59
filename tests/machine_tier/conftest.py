"""The machine tier (``tox -e machine``): the charm's machine side under a real systemd.

Each test gets a container of its own (``tests.nspawn``), booted from the cached Debian 12
tree, with what the Juju agent gives a unit's machine: ``juju-exec``
(``tests.machine_tier.juju_exec``), the charm's ``dispatch`` and ``goal-state``, which
lists the application's units: this one alone (``machine``), or two machines sharing
one database (``pair``). A test marked ``postgresql`` (and ``pair``) has the tier's one
PostgreSQL server (``tests.machine_tier.database``, booted once, in a container of its
own) reachable from its machines, a fresh database on it for the test. Each container
is powered off at the end, failed or not; with ``GARM_MACHINE_KEEP`` set a failed test's
containers are left running and the test's output says how to enter them
(CONTRIBUTING.md). ``GARM_MACHINE_RELEASE`` names a GARM
release archive to attach as the ``garm`` resource instead of the simulator.

Where no container can be booted (not root, no systemd-nspawn or debootstrap and no way
to install them) the tier skips, saying why; with ``CI=true`` it fails instead, so CI
never passes without it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests import nspawn
from tests.machine_tier import HOME, UNIT_FILE, charm_dir
from tests.machine_tier import database as postgresql
from tests.machine_tier.hook import ATTACHED
from tests.nspawn import PYTHONPATH, Machine

_NAMES = itertools.count()
_REPORTS = pytest.StashKey[list[pytest.TestReport]]()
SINCE = "2026-01-01T00:00:00Z"


def stubs(unit: str, units: Sequence[str]) -> dict[str, str]:
    """What runs, with the tier's PYTHONPATH, in place of Juju's commands on ``unit``'s
    machine: juju-exec, the charm's dispatch, and goal-state, which lists ``units``."""
    goal = {"units": {name: {"status": "active", "since": SINCE} for name in units}}
    return {
        "/usr/bin/juju-exec": '/usr/bin/python3 -m tests.machine_tier.juju_exec "$@"',
        f"{charm_dir(unit)}/dispatch": (
            '/usr/bin/python3 -m tests.machine_tier.hook "${JUJU_DISPATCH_PATH#hooks/}"'
        ),
        "/usr/local/bin/goal-state": f"echo '{json.dumps({**goal, 'relations': {}})}'",
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Each phase's report on the test, so that its fixtures can tell a failure."""
    report = yield
    item.stash.setdefault(_REPORTS, []).append(report)
    return report


@pytest.fixture(scope="session")
def tree() -> Path:
    """The cached Debian 12 tree, made on the first run (``tests.nspawn.rootfs``)."""
    reason = nspawn.unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the machine tier must run in CI, and cannot: {reason}")
        pytest.skip(f"no container can be booted here: {reason}")
    started = time.monotonic()
    tree = nspawn.rootfs()
    print(f"\nroot filesystem ready in {time.monotonic() - started:.1f} s: {tree}")
    return tree


@contextlib.contextmanager
def booted(
    tree: Path,
    request: pytest.FixtureRequest,
    directory: Path,
    unit: str = "garm/0",
    units: Sequence[str] = ("garm/0",),
    sockets: Path | None = None,
) -> Iterator[Machine]:
    """A container for ``unit``, with Juju's stand-ins in it, and the database server's
    ``sockets`` reachable if given; off at the end unless the test failed and
    ``GARM_MACHINE_KEEP`` asks to keep it."""
    name = f"garm-tier-{os.getpid()}-{next(_NAMES)}"
    started = time.monotonic()
    binds = [] if sockets is None else [(sockets, postgresql.SOCKETS)]
    machine = Machine.boot(tree, name, directory / f"{name}.console", binds)
    print(f"container {name} ({unit}) booted in {time.monotonic() - started:.1f} s")
    try:
        if sockets is not None:
            postgresql.reach(machine)
        for path, command in stubs(unit, units).items():
            _write(machine.path(path), f"#!/bin/sh\nPYTHONPATH={PYTHONPATH} exec {command}\n")
        machine.path(str(HOME)).mkdir(mode=0o700)
        others = [name for name in units if name != unit]
        machine.path(str(UNIT_FILE)).write_text("\n".join([unit, *others]) + "\n")
        release = os.environ.get("GARM_MACHINE_RELEASE")
        if release:
            machine.path(str(ATTACHED.parent)).mkdir(mode=0o700)
            shutil.copyfile(release, machine.path(str(ATTACHED)))
        yield machine
    finally:
        failed = any(report.failed for report in request.node.stash.get(_REPORTS, []))
        if failed and os.environ.get("GARM_MACHINE_KEEP"):
            _kept(machine, unit)
        else:
            machine.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgresql: the machine reaches the tier's PostgreSQL")


@pytest.fixture(scope="session")
def server(
    tree: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[postgresql.Server]:
    """The tier's PostgreSQL server, in a container of its own, booted at the first test
    that asks for it; its socket's directory is bound into the machines that use it.
    Kept running, as a failed test's machines are, when a test failed and
    ``GARM_MACHINE_KEEP`` asks for it."""
    directory = tmp_path_factory.mktemp("postgresql")
    sockets = directory / "sockets"
    sockets.mkdir()
    name = f"garm-tier-{os.getpid()}-postgresql"
    started = time.monotonic()
    machine = Machine.boot(
        tree, name, directory / f"{name}.console", [(sockets, postgresql.SOCKETS)]
    )
    try:
        postgresql.serve(machine)
        print(f"\nPostgreSQL ({name}) serving in {time.monotonic() - started:.1f} s")
        yield postgresql.Server(machine, sockets)
    finally:
        if request.session.testsfailed and os.environ.get("GARM_MACHINE_KEEP"):
            _kept(machine, "PostgreSQL")
        else:
            machine.stop()


@pytest.fixture
def sockets(server: postgresql.Server) -> Path:
    """A fresh database on the tier's server, for this test; its socket's directory."""
    postgresql.fresh(server.machine)
    return server.sockets


@pytest.fixture
def machine(tree: Path, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Machine]:
    """A booted container of this test's own: garm/0, its application's only unit; with
    the tier's PostgreSQL reachable when the test is marked ``postgresql``."""
    marked = request.node.get_closest_marker("postgresql") is not None
    sockets = request.getfixturevalue("sockets") if marked else None
    with booted(tree, request, tmp_path, sockets=sockets) as machine:
        yield machine


@pytest.fixture
def pair(
    tree: Path, request: pytest.FixtureRequest, tmp_path: Path, sockets: Path
) -> Iterator[tuple[Machine, Machine]]:
    """Two units' containers, garm/0 and garm/1, both reaching the tier's PostgreSQL."""
    units = ("garm/0", "garm/1")
    with (
        booted(tree, request, tmp_path, "garm/0", units, sockets) as first,
        booted(tree, request, tmp_path, "garm/1", units, sockets) as second,
    ):
        yield first, second


def _kept(machine: Machine, what: str) -> None:
    print(
        f"container {machine.name} ({what}) kept running (console: {machine.console}). "
        f"Enter it with\n    sudo nsenter --target {machine.leader} --all /bin/bash\n"
        f"and power it off with\n    sudo kill -s RTMIN+4 {machine.leader}"
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
