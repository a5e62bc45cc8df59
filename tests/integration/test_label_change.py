"""On a real Juju: deploy, relate a configurator, change labels, see the changeover end.

Every wait fails at once (``jubilant.WaitError``, with the status attached) when a unit
or application of the test goes into error, e.g. a failed hook, or its machine cannot
be provisioned, instead of running into its timeout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import jubilant
import pytest
from charms.garm_machine.v0.garm_configurator import GarmAppData

from tests.databags import SECOND_UNIT

if TYPE_CHECKING:
    from tests.integration.conftest import Settings

GARM = "garm"
STUB = "garm-configurator-stub"
LEADER = f"{GARM}/0"  # the only unit, in a model of its own
API_PORT = "9997/tcp"  # the api-port option's default
SETTLED = "1 scaleset in sync"
REPLACING = "Replacing scaleset sm-x64"
NO_CONFIGURATOR = "Integrate with garm-configurator: juju integrate garm garm-configurator"

# A fresh machine (image download, cloud-init) and the install hook; then a changeover,
# which waits for GARM to see on GitHub that the old scale set is retired.
DEPLOY_TIMEOUT = 30 * 60
CHANGE_TIMEOUT = 15 * 60


def _message(status: jubilant.Status) -> str:
    """garm/0's workload message ("" before the unit shows in the status)."""
    app = status.apps.get(GARM)
    unit = app.units.get(LEADER) if app else None
    return unit.workload_status.message if unit else ""


def _failed(status: jubilant.Status) -> bool:
    """A hook failed in one of the test's apps, or a machine could not be provisioned."""
    return jubilant.any_error(status, GARM, STUB) or any(
        machine.machine_status.current in {"error", "provisioning error"}
        for machine in status.machines.values()
    )


def _workload_messages(juju: jubilant.Juju) -> list[str]:
    """Every workload message the leader showed today, oldest first (juju show-status-log)."""
    log = juju.cli(
        "show-status-log", LEADER, "--type", "workload", "--days", "1", "--format", "json"
    )
    return [entry.get("message", "") for entry in json.loads(log)]


def _assert_converged(juju: jubilant.Juju) -> None:
    plan = juju.run(LEADER, "plan")
    assert plan.results["writes"] == "0", plan.results
    assert plan.results["phases"] == "converged", plan.results


def _generations(juju: jubilant.Juju) -> list[dict]:
    """The fleet as ``show-scalesets`` tells it: one dict per generation in GARM."""
    results = juju.run(LEADER, "show-scalesets").results
    assert "left-out" not in results, results
    return [keys for key, keys in results.items() if key.startswith("scaleset-")]


def _serving(juju: jubilant.Juju, databag: dict[str, str]) -> dict:
    """The one generation GARM holds, checked current, serving, with the databag's labels."""
    (generation,) = _generations(juju)
    assert generation["scaleset"] == databag["name"], generation
    assert (generation["current"], generation["phase"]) == ("yes", "serving"), generation
    assert generation["enabled"] == "yes", generation
    assert set(generation["labels"].split(",")) == set(databag["labels"].split(",")), generation
    return generation


def _databag(settings: Settings) -> dict[str, str]:
    return {
        **SECOND_UNIT,
        "provider_name": f"{STUB}-0",
        "org": settings.org,
        "github_app_id": settings.app_id,
        "github_installation_id": settings.installation_id,
        # A provider GARM can load; with no idle runner asked for it is never called.
        "openstack_auth_url": "http://keystone.invalid:5000/v3",
        "openstack_username": "unused",
        "openstack_password": "unused",
        "openstack_project_name": "unused",
        "openstack_user_domain_name": "Default",
        "openstack_project_domain_name": "Default",
        "openstack_region_name": "RegionOne",
        "openstack_network": "unused",
    }


def deploy_related(
    juju: jubilant.Juju,
    charms: tuple[Path, Path],
    settings: Settings,
    databag: dict[str, str],
    garm_config: Mapping[str, str | int] | None = None,
    *,
    expose: bool = False,
) -> Iterator[dict[str, str]]:
    """garm and the stand-in publishing ``databag`` deployed and related, garm settled;
    a fixture yields from it.

    Afterwards the relation is removed and garm left to delete the scale set, so that
    none is left on GitHub under the name the next run creates; then garm is removed as
    an operator removes it: every hook down to ``remove`` runs without error.
    """
    garm_charm, stub_charm = charms
    juju.deploy(
        garm_charm,
        GARM,
        resources={
            "garm": str(settings.garm_binary),
            "garm-provider-openstack": str(settings.provider_binary),
        },
        config=garm_config,
    )
    juju.deploy(
        stub_charm,
        STUB,
        config={
            "databag": json.dumps(databag),
            "github-private-key": settings.app_key.read_text(),
        },
    )
    juju.integrate(GARM, STUB)
    if expose:  # runners call GARM back on its API port
        juju.cli("expose", GARM)
    juju.wait(lambda s: _message(s) == SETTLED, error=_failed, timeout=DEPLOY_TIMEOUT)
    yield databag
    juju.remove_relation(GARM, STUB)
    juju.wait(lambda s: _message(s) == NO_CONFIGURATOR, error=_failed, timeout=CHANGE_TIMEOUT)
    juju.remove_application(GARM)
    juju.wait(lambda s: GARM not in s.apps, error=_failed, timeout=CHANGE_TIMEOUT)


@pytest.fixture(scope="module")
def deployed(
    garm_charm: Path, stub_charm: Path, settings: Settings, juju: jubilant.Juju
) -> Iterator[dict[str, str]]:
    """Both charms deployed and related, garm settled on the stub's one scaleset.

    The charms are packed first, so a failed pack leaves no model behind.
    """
    yield from deploy_related(juju, (garm_charm, stub_charm), settings, _databag(settings))


def _published(juju: jubilant.Juju) -> GarmAppData:
    """What garm tells the stub's units, read as a configurator unit reads it."""
    unit = f"{STUB}/0"
    relation = juju.exec("relation-ids garm-configurator", unit=unit).stdout.strip()
    raw = juju.exec(f"relation-get --format=json --app -r {relation} - {GARM}", unit=unit)
    return GarmAppData.from_databag(json.loads(raw.stdout or "{}"))


def test_deploy_serves_the_scaleset(deployed: dict[str, str], juju: jubilant.Juju):
    status = juju.status()
    app = status.apps[GARM]
    assert app.version, "garm's workload version is not set"
    assert API_PORT in app.units[LEADER].open_ports, app.units[LEADER].open_ports
    assert jubilant.all_active(status, GARM, STUB)
    _assert_converged(juju)
    _serving(juju, deployed)
    told = _published(juju).for_unit(f"{STUB}/0")
    assert told is not None and told.phase == "serving", told


def test_expose_opens_the_api_port_to_runners(deployed: dict[str, str], juju: jubilant.Juju):
    juju.cli("expose", GARM)
    juju.wait(lambda s: s.apps[GARM].exposed, error=_failed, timeout=CHANGE_TIMEOUT)
    assert API_PORT in juju.status().apps[GARM].units[LEADER].open_ports


def test_label_change_replaces_and_removes_the_predecessor(
    deployed: dict[str, str], juju: jubilant.Juju
):
    assert not any(m.startswith(REPLACING) for m in _workload_messages(juju))
    before = _serving(juju, deployed)
    changed = {**deployed, "labels": "self-hosted,linux,arm64"}
    juju.config(STUB, {"databag": json.dumps(changed)})

    # Settled again, after a changeover the status showed: the status log keeps it even
    # when a wait would poll past it.
    juju.wait(
        lambda s: (
            _message(s) == SETTLED
            and any(m.startswith(REPLACING) for m in _workload_messages(juju))
        ),
        error=_failed,
        timeout=CHANGE_TIMEOUT,
    )
    _assert_converged(juju)
    # A new generation under a new GARM name carries the new labels; the old one is gone.
    after = _serving(juju, changed)
    assert after["name"] != before["name"], (before, after)
    status = juju.status()
    assert status.apps[GARM].version
    assert API_PORT in status.apps[GARM].units[LEADER].open_ports
    told = _published(juju).for_unit(f"{STUB}/0")
    assert told is not None and told.phase == "serving" and told.replaced is None, told
