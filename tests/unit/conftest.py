"""Fixtures for driving the real charm: a sandboxed machine, resources, a seeded GARM."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import pytest
import scenario._runtime
import scenario.state
import yaml
from charmlibs import passwd
from ops import testing

from charm import GarmCharm
from garm import workload
from garm.client import GarmClient
from juju.status import CUT, MAX_STATUS
from scalesets.planner import YOUNGEST_DELETE
from tests.binaries import fake_garm, fake_provider
from tests.charm_states import RUN_LOG_STARTS, in_full
from tests.clock import FakeClock
from tests.garm_double import GarmDouble
from tests.machine import FakeSystemctl, Machine
from tests.passes import PROVIDER, Passes

# The stateful stories, longest first: a third of the suite's time between them. Run first,
# each beside short tests, so that two workers (tox.ini: pytest-xdist, ``--dist load
# --maxschedchunk 1``, which hands each worker two tests, then one per test it ends) start
# the two longest at once rather than one after the other at the end. A name no longer
# here only runs in its place.
LONGEST = (
    "tests/unit/test_lifecycle_stateful.py::test_juju_lifecycles_keep_every_invariant",
    "tests/unit/scalesets/test_changeover_stateful.py::test_changeovers_keep_every_invariant",
    "tests/unit/test_lifecycle_stateful.py::"
    "test_a_relation_integrated_again_at_once_takes_over_what_it_left",
    "tests/unit/test_lifecycle_stateful.py::"
    "test_a_leaders_lease_outlasts_its_next_pass_whatever_the_interval_does",
    "tests/unit/test_charm_tls.py::test_a_served_valid_certificate_never_stops_a_pass",
    "tests/unit/scalesets/test_refresh.py::"
    "test_refreshes_never_take_a_busy_runner_nor_warm_capacity_below_min_idle_minus_one",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest stories first, each followed by a short test (``LONGEST``)."""
    rank = {nodeid: n for n, nodeid in enumerate(LONGEST)}
    long = sorted((i for i in items if i.nodeid in rank), key=lambda i: rank[i.nodeid])
    short = [i for i in items if i.nodeid not in rank]
    paired = [item for pair in zip(long, short, strict=False) for item in pair]
    items[:] = paired + long[len(paired) // 2 :] + short[len(paired) // 2 :]


class _HarnessYaml:
    """``yaml`` as ops.testing reads charmcraft.yaml and writes the charm's metadata: by
    libyaml where PyYAML has it.

    ops.testing reads charmcraft.yaml for every Context (``scenario.state``) and writes
    metadata.yaml, config.yaml and actions.yaml before every hook (``scenario._runtime``),
    both with PyYAML in Python: a third of a charm story's time (cProfile). ops reads the
    files back with libyaml already; only the harness's YAML changes, not the charm's.
    """

    Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    @classmethod
    def safe_dump(cls, data: object) -> str:
        return yaml.dump(data, Dumper=cls.Dumper)

    @classmethod
    def safe_load(cls, stream: str | IO[str]) -> Any:
        return yaml.load(stream, Loader=cls.Loader)  # noqa: S506 (libyaml's safe loader)


@pytest.fixture(scope="session", autouse=True)
def _fast_harness_yaml() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scenario._runtime, "yaml", _HarnessYaml)
        patch.setattr(scenario.state, "yaml", _HarnessYaml)
        yield


@pytest.fixture(autouse=True)
def statuses_fit_juju_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every status the real charm sets, in every test, fits ``juju status``, and one cut
    to fit has its message in full in the log beside it (``juju.status.Summary.line``)."""
    run = testing.Context.run

    def checked(self: testing.Context, event: Any, state: testing.State) -> testing.State:
        RUN_LOG_STARTS[self] = len(self.juju_log)
        out = run(self, event, state)
        line = out.unit_status.message
        assert len(line) <= MAX_STATUS, line
        if line.endswith(CUT) and out.unit_status != state.unit_status:
            in_full(self, out)  # a status held from an earlier hook was logged there
        return out

    monkeypatch.setattr(testing.Context, "run", checked)


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: FakeClock) -> Machine:
    """This unit's machine: files under a temporary root, its commands answered by fakes.

    The charm reads the same clock as the GARM double, as a unit and the GARM on its
    machine do, so a test moves time for both (``clock.advance``).
    """
    paths = workload.Paths(tmp_path / "machine")
    monkeypatch.setattr(GarmCharm, "paths", paths)
    monkeypatch.setattr(GarmCharm, "now", staticmethod(clock))
    monkeypatch.setattr(GarmCharm, "service_user", pwd.getpwuid(os.getuid()).pw_name)
    users: list[str] = []
    monkeypatch.setattr(passwd, "add_user", lambda name, **_: users.append(name))
    systemctl = FakeSystemctl(clock, paths)
    monkeypatch.setattr(subprocess, "run", systemctl)
    return Machine(paths, systemctl, users)


@pytest.fixture
def ctx() -> testing.Context:
    return testing.Context(GarmCharm, app_name="garm")


@pytest.fixture
def resources(tmp_path: Path) -> frozenset[testing.Resource]:
    """The two resources as the operator attaches them: bare release binaries (stand-ins
    that the charm's checks run for real, ``tests/binaries``)."""
    garm = fake_garm(tmp_path / "resources" / "garm")
    provider = fake_provider(tmp_path / "resources" / "garm-provider-openstack")
    return frozenset(
        {
            testing.Resource(name="garm", path=garm),
            testing.Resource(name="garm-provider-openstack", path=provider),
        }
    )


@pytest.fixture
def world(garm: GarmDouble):
    garm.add_provider("garm-configurator-0")
    garm.add_provider("garm-configurator-1")
    garm.add_org("example-org")
    return garm


@pytest.fixture
def later(clock: FakeClock, garm: GarmDouble) -> Callable[..., None]:
    """Let time pass as between two passes of the reconcile timer, GARM working meanwhile.

    Thirty seconds by default: the timer's interval, and the age below which the charm
    deletes no scaleset (GARM may not have started its worker for it yet).
    """

    def later(delta: timedelta = YOUNGEST_DELETE) -> None:
        clock.advance(delta)
        garm.tick()

    return later


@pytest.fixture
def client(garm: GarmDouble):
    """A client logged in to GARM as the charm is, the configurator's provider and org
    registered (``test_garm_client`` has a bare one of its own)."""
    garm.add_provider(PROVIDER)
    garm.add_org("example-org")
    c = GarmClient(garm.url, garm.username, garm.password, timeout=(1.0, 2.0))
    yield c
    c.close()


@pytest.fixture
def passes(garm: GarmDouble, client: GarmClient, clock: FakeClock) -> Passes:
    """Whole reconcile passes over ``client``, each one's requests measured."""
    return Passes(garm, client, clock)
