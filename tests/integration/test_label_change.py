"""On a real Juju: deploy, relate a configurator, change labels, see the changeover end."""

from __future__ import annotations

import json
import os

import jubilant

from tests.databags import SECOND_UNIT

SETTLED = "1 scaleset in sync"


def _message(status: jubilant.Status) -> str:
    return status.apps["garm"].units["garm/0"].workload_status.message


def test_label_change_replaces_and_removes_the_predecessor(juju, garm_charm, stub_charm):
    juju.deploy(
        garm_charm,
        "garm",
        resources={
            "garm": os.environ["GARM_BINARY"],
            "garm-provider-openstack": os.environ["GARM_PROVIDER_OPENSTACK_BINARY"],
        },
    )
    databag = {**SECOND_UNIT, "provider_name": "garm-configurator-stub-0"}
    juju.deploy(stub_charm, "garm-configurator-stub", config={"databag": json.dumps(databag)})
    juju.integrate("garm", "garm-configurator-stub")
    juju.wait(lambda status: _message(status) == SETTLED)

    changed = {**databag, "labels": "self-hosted,linux,arm64"}
    juju.config("garm-configurator-stub", {"databag": json.dumps(changed)})
    juju.wait(lambda status: _message(status).startswith("Replacing scaleset sm-x64"))
    juju.wait(lambda status: _message(status) == SETTLED)

    plan = juju.run("garm/0", "plan")
    assert plan.results["writes"] == "0"
    assert plan.results["phases"] == "converged"
