"""The pass, without ops: typed inputs in, one result out.

No ops.testing here: each case builds ``leader.Inputs`` as the charm would from Juju, runs
the pass on a sandboxed machine (files under a temporary root, systemctl faked) against the
GARM double over HTTP, and reads the ``PassResult``: the status, what to tell Juju, and
what the pass did on the machine and in GARM. The charm's own tests drive the same pass
through Juju's hooks (``test_charm*.py``).
"""

from __future__ import annotations

import dataclasses
import os
import pwd
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import leader
from garm.config import PostgresqlDatabase, Proxy
from garm.setup import AdminLogin
from juju.config import ConfigError
from juju.lifecycle import SQLITE_MULTI_UNIT, WHOLE, View
from juju.records import CharmSecrets, Configurators, PeerRecords
from tests.binaries import fake_garm, fake_provider
from tests.clock import FakeClock
from tests.databags import KEY_SECRET_URI, PASSWORD_SECRET_URI, SOLE_UNIT
from tests.garm_double import FAKE_APP_KEY, GarmDouble
from tests.machine import Machine
from tests.options import charm_config

UNIT = "garm/0"
JWT = "J" * 40 + "wt-5ecret!"
PASSPHRASE = "Db-Pa55phrase-0123456789abcdefgh"
GRANTED = {PASSWORD_SECRET_URI: "openstack-Pa55word", KEY_SECRET_URI: FAKE_APP_KEY}


@pytest.fixture
def attached(tmp_path: Path) -> dict[str, Path | None]:
    return {
        "garm": fake_garm(tmp_path / "resources" / "garm"),
        "garm-provider-openstack": fake_provider(tmp_path / "resources" / "provider"),
    }


@pytest.fixture
def make(machine: Machine, world: GarmDouble, clock: FakeClock, attached) -> Callable[..., Any]:
    """``make(**changes)``: the inputs of a leader of one configurator unit, with changes.

    Keys of ``leader.Inputs`` change the hook's inputs; any other key changes the leader's
    (``leader.LeaderInputs``), except ``config``, which is the options to read.
    """
    port = int(world.url.rsplit(":", 1)[1])

    def make(**changes: Any) -> leader.Inputs:
        options = {"api-port": port, **changes.pop("config", {})}
        try:
            config: Any = charm_config(options)
        except ConfigError as exc:
            config = exc
        lead = leader.LeaderInputs(
            config=config,
            secrets=CharmSecrets(
                AdminLogin(world.username, "admin@garm.local", world.password), JWT, PASSPHRASE
            ),
            configurators=Configurators(
                True, (("garm-configurator/0", SOLE_UNIT),), WHOLE, {1: "garm-configurator"}
            ),
            postgresql=None,
            resources=attached,
            peers=PeerRecords(),
            address="10.1.2.3",
            proxy=Proxy(),
            read_secret=GRANTED.get,
        )
        hook = {f.name for f in dataclasses.fields(leader.Inputs)}
        lead = dataclasses.replace(lead, **{k: v for k, v in changes.items() if k not in hook})
        inputs = leader.Inputs(
            unit=UNIT,
            machine=leader.Machine(machine.paths, pwd.getpwuid(os.getuid()).pw_name),
            now=clock,
            dying=False,
            alive=frozenset({UNIT}),
            postgresql_related=False,
            leader=lead,
        )
        return dataclasses.replace(inputs, **{k: v for k, v in changes.items() if k in hook})

    return make


def status(result: leader.PassResult) -> str:
    return f"{result.summary.kind}: {result.summary.message}"


# --- the table: inputs in, the status out -----------------------------------------------

# Each row: the inputs changed from a leader of one valid unit, and the status they earn.
ROWS: Mapping[str, tuple[dict[str, Any], str]] = {
    # Nothing is amiss: GARM is set up and the unit's scaleset created.
    "leads": ({}, "active: 1 scaleset in sync"),
    # Juju says this unit is going: it changes nothing any more (ADR 0002).
    "dying": ({"dying": True}, f"maintenance: {leader.BEING_REMOVED}"),
    "not the leader": ({"leader": None}, f"active: {leader.STANDING_BY}"),
    # Two live units and GARM on sqlite: only one of them can hold the data.
    "not the leader, sqlite shared": (
        {"leader": None, "alive": frozenset({UNIT, "garm/1"})},
        f"blocked: {SQLITE_MULTI_UNIT}",
    ),
    "not the leader, postgresql related": (
        {"leader": None, "alive": frozenset({UNIT, "garm/1"}), "postgresql_related": True},
        f"active: {leader.STANDING_BY}",
    ),
    "invalid config": (
        {"config": {"api-port": 0}},
        "blocked: Invalid config: api-port: must be 1-65535",
    ),
    # The charm's own secrets are made by the charm, from this result, for the next hook.
    "no secrets yet": (
        {"secrets": None},
        "waiting: Secrets created; GARM is set up on the next hook",
    ),
    "a resource not attached": (
        {"resources": {"garm": None, "garm-provider-openstack": None}},
        "blocked: Attach the garm resource: juju attach-resource garm garm=<file>",
    ),
    # A relation with no answer yet, on a machine where GARM never ran: nothing starts.
    "postgresql not answered": (
        {"postgresql_related": True},
        "waiting: Waiting for PostgreSQL to answer",
    ),
    # Another unit holds GARM's sqlite data and is alive: this one must not start GARM.
    "sqlite data elsewhere": (
        {"peers": PeerRecords(home="garm/1"), "alive": frozenset({UNIT, "garm/1"})},
        "blocked: GARM's sqlite data is on garm/1: scale to one unit so that it leads",
    ),
    # Nor may it start GARM on a PostgreSQL new to it while that unit's sqlite holds them.
    "postgresql new, sqlite data elsewhere": (
        {
            "postgresql_related": True,
            "postgresql": PostgresqlDatabase("db.internal", 5432, "garm", "pw", "garm"),
            "peers": PeerRecords(home="garm/1"),
            "alive": frozenset({UNIT, "garm/1"}),
        },
        "blocked: GARM's sqlite data is on garm/1: scale to one unit so that it leads",
    ),
    "no configurator": (
        {"configurators": Configurators(False)},
        "blocked: Integrate with garm-configurator: juju integrate garm garm-configurator",
    ),
    # A partial view (a unit not joined here yet) retires nothing and says what it waits for.
    "partial view": (
        {"configurators": Configurators(True, (), View(False, "garm-configurator/0"))},
        "waiting: Waiting for garm-configurator/0: nothing it may serve is retired until then",
    ),
    "admin refused": (
        {"secrets": CharmSecrets(AdminLogin("admin", "a@b.c", "wrong"), JWT, PASSPHRASE)},
        "blocked: GARM refused the admin login kept by the charm",
    ),
}


@pytest.mark.parametrize(("changes", "expected"), ROWS.values(), ids=ROWS.keys())
def test_the_status_a_pass_earns(make, changes, expected):
    assert status(leader.run(make(**changes))) == expected


# --- what the result tells Juju ---------------------------------------------------------


def test_a_leader_that_reconciled_tells_juju_everything(make, world, clock):
    result = leader.run(make())
    assert result.ports == (int(world.url.rsplit(":", 1)[1]),)
    assert result.workload_version == "v0.2.1"
    assert result.outcome is not None and result.outcome.ok
    # What each configurator application is told, keyed by relation id.
    assert result.publish_back is not None and list(result.publish_back) == [1]
    assert "lg-x64" not in str(result.publish_back) and "sm-x64" in str(result.publish_back)
    # The first leader on sqlite records itself as the data's home.
    assert result.sqlite_home == "claim"
    assert not result.make_secrets and result.publish_telemetry
    # GARM answered: the collector's metrics token may be renewed from it.
    assert result.garm_here is not None and result.garm_here.fetch_token is not None
    assert result.next_due == clock() + timedelta(seconds=30)
    assert [s["name"] for s in world.scalesets()] != []


def test_a_pass_that_stops_early_tells_what_it_did_so_far(make, world):
    world.inject("GET", r"/controller/?", status=500, error="boom", times=10)
    result = leader.run(make())
    assert status(result) == "waiting: GARM setup failed, will retry: boom"
    # GARM runs, so its port is open and its version shown; no scaleset pass ran.
    assert result.ports is not None and result.workload_version == "v0.2.1"
    assert result.outcome is None and result.publish_back is None
    assert result.garm_here is not None and result.garm_here.fetch_token is None


def test_an_invalid_config_leaves_the_collector_and_ports_as_they_were(make, machine):
    result = leader.run(make(config={"api-port": 0}))
    assert not result.publish_telemetry
    assert result.ports is None and result.workload_version is None
    assert not machine.paths.config_file.exists()  # GARM was not touched


def test_no_secrets_asks_for_them_and_touches_nothing(make, machine, world):
    result = leader.run(make(secrets=None))
    assert result.make_secrets
    assert not machine.paths.binary.exists() and world.requests == []


def test_units_that_do_not_lead_close_the_port_and_stop_garm(make, machine):
    leader.run(make())
    assert machine.paths.unit_file.exists() and machine.paths.timer_file.exists()
    result = leader.run(make(leader=None))
    assert result.ports == () and result.workload_version == ""
    assert result.garm_here is None and result.publish_telemetry
    assert not machine.paths.unit_file.exists() and not machine.paths.timer_file.exists()


def test_a_dying_leader_stands_down_but_keeps_garm_for_the_collector(make, machine):
    leader.run(make())
    result = leader.run(make(dying=True))
    assert result.ports == () and not machine.paths.timer_file.exists()
    assert result.outcome is None and result.publish_back is None
    # GARM was not reached: the collector keeps the token it holds.
    assert result.garm_here is not None and result.garm_here.fetch_token is None


def test_a_dying_leader_with_an_invalid_config_leaves_the_collector_as_it_was(make):
    result = leader.run(make(dying=True, config={"api-port": 0}))
    assert not result.publish_telemetry and result.garm_here is None


def test_a_leader_that_moved_to_postgresql_forgets_its_sqlite_home(make, machine):
    answer = PostgresqlDatabase("db.internal", 5432, "garm", "pw", "garm")
    # GARM holds no scaleset yet, so moving it to PostgreSQL loses nothing.
    configurators = Configurators(True)
    result = leader.run(
        make(
            postgresql_related=True,
            postgresql=answer,
            peers=PeerRecords(home=UNIT),
            configurators=configurators,
        )
    )
    assert result.sqlite_home == "forget"
    assert "db.internal" in machine.paths.config_file.read_text()


# --- actions ----------------------------------------------------------------------------


PLAN_REFUSALS: Mapping[str, tuple[dict[str, Any], str]] = {
    "not the leader": ({"leader": None}, "Run this on the leader unit: juju run garm/leader plan"),
    "dying": ({"dying": True}, leader.BEING_REMOVED),
    "invalid config": (
        {"config": {"handover-timeout-minutes": -1}},
        "Invalid config: handover-timeout-minutes: must be 0-1440",
    ),
    "no secrets yet": ({"secrets": None}, leader.NO_ADMIN_YET),
}


@pytest.mark.parametrize(("changes", "failure"), PLAN_REFUSALS.values(), ids=PLAN_REFUSALS.keys())
def test_plan_refuses_what_it_cannot_answer(make, world, changes, failure):
    assert leader.plan(make(**changes)).failure == failure
    assert world.writes() == []


def test_plan_tells_the_writes_and_makes_none(make, world):
    leader.run(make(configurators=Configurators(True)))  # GARM set up, nothing asked
    before = len(world.writes())
    answer = leader.plan(make())
    assert answer.failure == ""
    assert answer.results["writes"] == "1"  # the unit's scaleset (it asks for no template)
    assert "create scaleset" in answer.results["actions"]
    assert len(world.writes()) == before


def test_reconcile_results_say_the_status_and_what_was_done(make):
    results = leader.reconciled(leader.run(make()))
    assert results["status"] == "active: 1 scaleset in sync"
    assert "create scaleset" in results["done"]
