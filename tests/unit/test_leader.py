"""The pass, without ops: typed inputs in, one result out.

No ops.testing here: each case builds ``leader.Inputs`` as the charm would from Juju, runs
the pass on a sandboxed machine (files under a temporary root, systemctl faked) against the
GARM double over HTTP, and reads the ``PassResult``: the status, what to tell Juju, and
what the pass did on the machine and in GARM. The charm's own tests drive the same pass
through Juju's hooks (``test_charm*.py``).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import pwd
import shutil
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from charmlibs import passwd

import leader
from garm import workload
from garm.config import PostgresqlDatabase, Proxy
from garm.setup import NO_ADMIN_YET, AdminLogin
from juju import records
from juju.config import ConfigError
from juju.lifecycle import SQLITE_MULTI_UNIT, WHOLE, View
from juju.records import Configurators, InternalSecrets, LeaderInputs, PeerRecords
from observe.token import LeaderGarm
from tests.binaries import CHECK_USER, fake_garm, fake_provider, require_checks
from tests.clock import FakeClock
from tests.databags import EXAMPLE_UNIT, KEY_SECRET_URI, PASSWORD_SECRET_URI, SOLE_UNIT
from tests.garm_double import FAKE_APP_KEY, GarmDouble
from tests.machine import Machine
from tests.options import charm_config

UNIT = "garm/0"
JWT = "J" * 40 + "wt-5ecret!"
PASSPHRASE = "Db-Pa55phrase-0123456789abcdefgh"
GRANTED = {PASSWORD_SECRET_URI: "openstack-Pa55word", KEY_SECRET_URI: FAKE_APP_KEY}


def given(answers: Mapping[str, Any], read: list[str] | None = None) -> LeaderInputs:
    """The leader's inputs over plain answers, one per ``LeaderInputs`` reader.

    ``resource`` and ``read_secret`` are mappings by name and URI. ``read`` notes each
    answer the pass asks for.
    """

    def reader(name: str) -> Callable[..., Any]:
        def answer(*key: str) -> Any:
            if read is not None:
                read.append(name)
            return answers[name].get(*key) if key else answers[name]

        return answer

    return LeaderInputs(**{name: reader(name) for name in answers})


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
    answers (``given``), except ``config``, which is the options to read, and ``read``,
    which notes the answers the pass asks for.
    """
    port = int(world.url.rsplit(":", 1)[1])

    def make(**changes: Any) -> leader.Inputs:
        options = {"api-port": port, **changes.pop("config", {})}
        try:
            config: Any = charm_config(options)
        except ConfigError as exc:
            config = exc
        read = changes.pop("read", None)
        answers = {
            "config": config,
            "admin": AdminLogin(world.username, "admin@garm.local", world.password),
            "internal": InternalSecrets(JWT, PASSPHRASE),
            "configurators": Configurators(
                True, (("garm-configurator/0", SOLE_UNIT),), WHOLE, {1: "garm-configurator"}
            ),
            "postgresql": None,
            "resource": attached,
            "peers": PeerRecords(),
            "address": "10.1.2.3",
            "tls": None,
            "proxy": Proxy(),
            "provider_record": None,
            "read_secret": GRANTED,
        }
        hook = {f.name for f in dataclasses.fields(leader.Inputs)}
        answers.update({k: v for k, v in changes.items() if k not in hook})
        inputs = leader.Inputs(
            unit=UNIT,
            machine=records.Machine(machine.paths, pwd.getpwuid(os.getuid()).pw_name),
            now=clock,
            asked=clock(),
            dying=False,
            alive=frozenset({UNIT}),
            postgresql_related=False,
            leader=given(answers, read),
        )
        return dataclasses.replace(inputs, **{k: v for k, v in changes.items() if k in hook})

    return make


def backend(machine: Machine) -> str:
    return tomllib.loads(machine.paths.config_file.read_text())["database"]["backend"]


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
        {"admin": None, "internal": None},
        "waiting: Secrets created; GARM is set up on the next hook",
    ),
    "a resource not attached": (
        {"resource": {"garm": None, "garm-provider-openstack": None}},
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
            "peers": PeerRecords(home="garm/1", running={}, joined=frozenset({"garm/1"})),
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
        {"admin": AdminLogin("admin", "a@b.c", "wrong")},
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


def test_the_resources_are_checked_as_garms_user_made_before_they_run(
    make, machine, monkeypatch, tmp_path
):
    # The service's user stands for GARM's: the check runs the binary as it, so the user
    # must exist before the first check (and it is made at once: ``workload.ensure_user``).
    require_checks()
    shared = Path(tempfile.mkdtemp(prefix="garm-check-test-", dir="/tmp"))
    shared.chmod(0o1777)
    ran_as = shared / "ran-as"
    made: list[tuple[str, bool]] = []
    monkeypatch.setattr(passwd, "add_user", lambda name, **_: made.append((name, ran_as.exists())))
    attached = {
        "garm": fake_garm(tmp_path / "juju" / "garm", body=f"id -un > {ran_as}; echo v0.2.1"),
        "garm-provider-openstack": fake_provider(tmp_path / "juju" / "provider"),
    }
    try:
        result = leader.run(
            make(machine=records.Machine(machine.paths, CHECK_USER), resource=attached)
        )
        assert status(result) == "active: 1 scaleset in sync"
        assert made == [(workload.USER, False)]  # made before anything attached ran
        assert ran_as.read_text() == f"{CHECK_USER}\n"
    finally:
        shutil.rmtree(shared)


def test_a_pass_that_stops_early_tells_what_it_did_so_far(make, world):
    world.inject("GET", r"/controller/?", status=500, error="boom", times=10)
    result = leader.run(make())
    assert status(result) == "waiting: GARM setup failed, will retry: boom"
    # GARM runs, so its port is open and its version shown; no scaleset pass ran.
    assert result.ports == (int(world.url.rsplit(":", 1)[1]),)
    assert result.workload_version == "v0.2.1"
    assert result.outcome is None and result.publish_back is None
    assert result.garm_here is not None and result.garm_here.fetch_token is None


def test_an_invalid_config_leaves_the_collector_and_ports_as_they_were(make, machine):
    result = leader.run(make(config={"api-port": 0}))
    assert not result.publish_telemetry
    assert result.ports is None and result.workload_version is None
    assert not machine.paths.config_file.exists()  # GARM was not touched


def test_no_secrets_asks_for_them_and_touches_nothing(make, machine, world):
    result = leader.run(make(admin=None, internal=None))
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
    first = leader.run(make())
    result = leader.run(make(dying=True))
    # GARM serves on, its port open, until the stop hook; on sqlite no lease, no timer.
    assert result.ports == first.ports != () and not machine.paths.timer_file.exists()
    assert result.outcome is None and result.publish_back is None
    # GARM was not reached: the collector keeps the token it holds.
    assert result.garm_here is not None and result.garm_here.fetch_token is None


def test_a_dying_leader_with_an_invalid_config_leaves_the_collector_as_it_was(make):
    result = leader.run(make(dying=True, config={"api-port": 0}))
    assert not result.publish_telemetry and result.garm_here is None


def test_a_leader_that_moved_to_postgresql_forgets_its_sqlite_home(make, machine):
    leader.run(make(configurators=Configurators(True)))  # GARM on sqlite, no scaleset
    assert backend(machine) == "sqlite3"
    answer = PostgresqlDatabase("db.internal", 5432, "garm", "pw", "garm")
    # GARM holds no scaleset, so moving it to PostgreSQL loses nothing.
    moved = make(
        postgresql_related=True,
        postgresql=answer,
        peers=PeerRecords(home=UNIT),
        configurators=Configurators(True),
    )
    result = leader.run(moved)
    assert result.sqlite_home == "forget"
    assert backend(machine) == "postgresql"


# --- actions ----------------------------------------------------------------------------


PLAN_REFUSALS: Mapping[str, tuple[dict[str, Any], str]] = {
    "not the leader": ({"leader": None}, "Run this on the leader unit: juju run garm/leader plan"),
    "dying": ({"dying": True}, leader.BEING_REMOVED),
    "invalid config": (
        {"config": {"handover-timeout-minutes": -1}},
        "Invalid config: handover-timeout-minutes: must be 0-1440",
    ),
    "no admin login yet": ({"admin": None}, NO_ADMIN_YET),
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
    assert "create scaleset" in str(answer.results["actions"])
    assert len(world.writes()) == before


def test_reconcile_results_say_the_status_and_what_was_done(make):
    results = leader.reconciled(leader.run(make()))
    assert results["status"] == "active: 1 scaleset in sync"
    assert "create scaleset" in results["done"]


def test_no_secrets_keeps_garm_for_the_collector_without_asking_it(make, world):
    result = leader.run(make(admin=None, internal=None))
    assert result.garm_here == LeaderGarm(int(world.url.rsplit(":", 1)[1]))


def test_a_unit_that_lost_the_postgresql_relation_but_runs_on_it_is_not_crowded(make):
    answer = PostgresqlDatabase("db.internal", 5432, "garm", "pw", "garm")
    leader.run(make(postgresql_related=True, postgresql=answer))  # configured on PostgreSQL
    standing = make(leader=None, alive=frozenset({UNIT, "garm/1"}), postgresql_related=False)
    assert status(leader.run(standing)) == f"active: {leader.STANDING_BY}"


def test_plan_needs_only_the_admin_login(make):
    assert leader.plan(make(internal=None)).failure == ""


def test_garm_is_not_read_for_a_pass_that_may_not_start_it(make, world, machine):
    leader.run(make(configurators=Configurators(True, (("garm-configurator/0", EXAMPLE_UNIT),))))
    assert (machine.paths.config_dir / "providers").is_dir()  # an earlier provider, kept
    asked = len(world.requests)
    elsewhere = make(
        configurators=Configurators(True),
        peers=PeerRecords(home="garm/1"),
        alive=frozenset({UNIT, "garm/1"}),
    )
    machine.paths.config_file.unlink()  # this unit never ran GARM, as far as it knows
    assert status(leader.run(elsewhere)).startswith("blocked: GARM's sqlite data is on garm/1")
    assert world.requests[asked:] == []


# --- what the pass reads: nothing it does not use ---------------------------------------


READS: Mapping[str, tuple[dict[str, Any], set[str]]] = {
    # A dying leader tells the collector which GARM it ran, and nothing else.
    "dying": ({"dying": True}, {"config", "internal"}),
    "invalid config": ({"config": {"api-port": 0}}, {"config"}),
    "no secrets yet": ({"admin": None, "internal": None}, {"config", "admin", "internal"}),
    # With external-url set, this unit's address is never asked (no network-get); nor
    # is a secret, which this unit's data names none of.
    "external url": (
        {"config": {"external-url": "https://garm.example"}},
        set(inspect.signature(LeaderInputs).parameters) - {"address", "read_secret"},
    ),
}


@pytest.mark.parametrize(("changes", "read"), READS.values(), ids=READS.keys())
def test_the_pass_reads_only_what_its_steps_reach(make, changes, read):
    reads: list[str] = []
    leader.run(make(read=reads, **changes))
    assert set(reads) == read


@pytest.mark.parametrize("changes", [{"dying": True}, {"leader": None}])
def test_a_refused_action_reads_nothing(make, changes):
    inputs, reads = make(**changes), []
    reading = make(read=reads).leader
    assert leader.plan(dataclasses.replace(inputs, leader=inputs.leader and reading)).failure
    assert reads == []
